#ifndef HERD_SHM_H
#define HERD_SHM_H
#include <stddef.h>
#include <stdint.h>
#define HERD_SHM_BROKEN (-2)
struct herd_shm;
size_t herd_shm_bytes(uint64_t capacity);
int herd_shm_create(uint64_t capacity, int *fds);
struct herd_shm *herd_shm_open(int memfd, uint64_t capacity, int side, int my_efd, int peer_efd,
                               int ctl, long spin_ns, int *err);
void herd_shm_close(struct herd_shm *s);
long herd_shm_recv(struct herd_shm *s, uint8_t *buf, size_t n);
long herd_shm_send(struct herd_shm *s, const uint8_t *buf, size_t n);
int herd_shm_arm(struct herd_shm *s, int drain);
int herd_shm_spin(struct herd_shm *s);
int herd_shm_wait_in(struct herd_shm *s);
int herd_shm_wait_out(struct herd_shm *s);
int herd_shm_fd(struct herd_shm *s);
int herd_send_fds(int sock, const int *fds, int n);
int herd_recv_fds(int sock, int *fds, int n, int timeout_ms);
int herd_recv_byte(int sock, int timeout_ms);
int herd_send_byte(int sock, int byte);
void herd_shm_damage_for_test(struct herd_shm *s, uint64_t delta);
int herd_eventfd(void);
void herd_eventfd_signal(int fd);
void herd_eventfd_drain(int fd);
#endif
