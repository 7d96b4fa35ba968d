/* The waits of herd's socket transports (TCP and Unix-domain stream
   sockets): a reader spins, receiving without waiting, for a short while
   (the adaptive spin of herd_spin.h), then blocks in recv(). The spin is
   its own call so that GHC can make it an unsafe one (no hand-over of the
   runtime, which cost more than a short spin saves); the blocking receive
   is an interruptible call. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include "herd_sock.h"

size_t herd_spin_bytes(void) { return sizeof(struct herd_spin); }

void herd_spin_setup(struct herd_spin *s, long spin_ns) { herd_spin_init(s, spin_ns); }

/* Make a connected socket blocking for reads that wait (a receive with
   MSG_DONTWAIT still returns at once), with a one-second receive timeout so
   that a waiting read returns now and then and an interruption that came
   just before it is acted on. Returns 0 or an errno. */
int herd_socket_blocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return errno;
    struct timeval limit = { 1, 0 };
    return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) == 0 ? 0 : errno;
}

/* Receive without waiting, again and again, until bytes come or the spin's
   time is up: the count, 0 at end of stream, -1 when nothing came (or the
   spin is paused), -errno on an error. Each try is a system call, so the
   clock is read on every one. */
long herd_recv_spin(int fd, uint8_t *buf, size_t n, struct herd_spin *s)
{
    long deadline;
    if (!herd_spin_begin(s, &deadline)) return -1;
    for (;;) {
        ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
        if (r >= 0) { herd_spin_found(s); return (long)r; }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -errno;
        if (herd_now_ns() > deadline) break;
    }
    herd_spin_missed(s);
    return -1;
}

/* A receive that waits (see herd_socket_blocking): the count, 0 at end of
   stream, -1 when nothing came yet (timeout or interruption), -errno. One
   system call per message, as a plain C reader would make. */
long herd_recv_wait(int fd, uint8_t *buf, size_t n, struct herd_spin *s)
{
    long start = herd_now_ns();
    ssize_t r = recv(fd, buf, n, 0);
    if (r > 0) herd_spin_waited(s, start);
    if (r >= 0) return (long)r;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return -1;
    return -errno;
}

/* Wait (up to a second) until the socket takes bytes: 1, 0 on a timeout,
   -errno. */
int herd_wait_writable(int fd)
{
    struct pollfd p = { fd, POLLOUT, 0 };
    int rc = poll(&p, 1, 1000);
    return rc < 0 ? -errno : rc == 0 ? 0 : 1;
}

/* Whether a send on the socket would make progress now (no wait):
   1 yes, 0 no, -errno on error. */
int herd_writable_now(int fd)
{
    struct pollfd p = { fd, POLLOUT, 0 };
    int rc = poll(&p, 1, 0);
    return rc < 0 ? -errno : rc == 0 ? 0 : 1;
}
