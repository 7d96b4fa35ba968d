#ifndef HERD_SYS_H
#define HERD_SYS_H
int herd_pin_process_threads(int cpu);
int herd_start_parent_watchdog(int fd);
int herd_set_liveness(int fd, int idle_s, int interval_s, int count, unsigned int timeout_ms);
int herd_epoll_create(void);
int herd_epoll_add(int epfd, int fd, int tag, int edge);
int herd_epoll_del(int epfd, int fd);
int herd_epoll_wait(int epfd, int *tags, int max, int timeout_ms);
int herd_nice_process_threads(int value);
#endif
