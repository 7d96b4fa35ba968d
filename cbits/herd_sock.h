#ifndef HERD_SOCK_H
#define HERD_SOCK_H
#include <stddef.h>
#include <stdint.h>
#include "herd_spin.h"
size_t herd_spin_bytes(void);
void herd_spin_setup(struct herd_spin *s, long spin_ns);
int herd_socket_blocking(int fd);
long herd_recv_spin(int fd, uint8_t *buf, size_t n, struct herd_spin *s);
long herd_recv_wait(int fd, uint8_t *buf, size_t n, struct herd_spin *s);
int herd_wait_writable(int fd);
#endif
