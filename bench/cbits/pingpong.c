/* The floor under herd's latency and bandwidth benchmarks: the same three
   mechanisms (TCP on loopback, a Unix-domain stream socket, herd's shared
   rings with their spin-then-eventfd wake-up) driven from C with nothing on
   top, between this process and a forked child.

   Everything the child needs is set up before fork(): in a process with
   other threads (GHC's runtime) the child may only make system calls, so
   it allocates nothing and ends with _exit(). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "herd_shm.h"
#include "herd_sock.h"

#define MSG_BYTES 16

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; return -1; }
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const char *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = write(fd, buf + put, n - put);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; return -1; }
        put += (size_t)r;
    }
    return 0;
}

/* read_full with herd's socket wait: the adaptive spin of herd_spin.h,
   then a blocking read. */
static int spin_read_full(int fd, char *buf, size_t n, struct herd_spin *s)
{
    size_t got = 0;
    while (got < n) {
        long r = herd_recv_spin(fd, (uint8_t *)buf + got, n - got, s);
        if (r == -1) r = herd_recv_wait(fd, (uint8_t *)buf + got, n - got, s);
        if (r == -1) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int ring_read_full(struct herd_shm *s, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        long r = herd_shm_recv(s, (uint8_t *)buf + got, n - got);
        if (r > 0) { got += (size_t)r; continue; }
        if (r == 0 || r == HERD_SHM_BROKEN) return -1;
        if (!herd_shm_spin(s) && herd_shm_wait_in(s) < 0) return -1;
    }
    return 0;
}

static int ring_write_full(struct herd_shm *s, const char *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        long r = herd_shm_send(s, (const uint8_t *)buf + put, n - put);
        if (r > 0) { put += (size_t)r; continue; }
        if (r == HERD_SHM_BROKEN) return -1;
        if (herd_shm_wait_out(s) <= 0) return -1;
    }
    return 0;
}

/* A connected pair of stream sockets: 0 TCP on loopback, 1 Unix. */
static int socket_pair(int kind, int *a, int *b)
{
    if (kind == 1) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
        *a = sv[0];
        *b = sv[1];
        return 0;
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in ad;
    memset(&ad, 0, sizeof ad);
    ad.sin_family = AF_INET;
    ad.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof ad;
    if (l < 0 || bind(l, (struct sockaddr *)&ad, sizeof ad) != 0
        || getsockname(l, (struct sockaddr *)&ad, &len) != 0 || listen(l, 1) != 0) return -1;
    *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*a < 0 || connect(*a, (struct sockaddr *)&ad, sizeof ad) != 0) return -1;
    *b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    close(l);
    if (*b < 0) return -1;
    int one = 1;
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

/* Both ends of a shared-memory link in this process, the child to take
   side 1 after fork. */
static int ring_pair(uint64_t capacity, long spin_ns, struct herd_shm **parent, struct herd_shm **child,
                     int *ctl_parent, int *ctl_child)
{
    int fds[3], sv[2], err;
    if (herd_shm_create(capacity, fds) != 0) return -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    int worker_efd = dup(fds[2]), master_efd = dup(fds[1]);
    *parent = herd_shm_open(fds[0], capacity, 0, fds[1], fds[2], sv[0], spin_ns, &err);
    *child = herd_shm_open(fds[0], 0, 1, worker_efd, master_efd, sv[1], spin_ns, &err);
    close(fds[0]);
    *ctl_parent = sv[0];
    *ctl_child = sv[1];
    return *parent != NULL && *child != NULL ? 0 : -1;
}

/* Round trips of a 16-byte message. kind: 0 tcp, 1 unix, 2 shm. Each
   reader waits as herd's do: it spins for up to spin_ns (adaptively,
   herd_spin.h), then blocks; spin_ns 0 gives plain blocking waits. Fills
   samples (microseconds) and returns 0, or -1. */
int herd_pingpong(int kind, int rounds, long spin_ns, double *samples)
{
    char buf[MSG_BYTES];
    memset(buf, 7, sizeof buf);
    if (kind == 2) {
        struct herd_shm *mine, *theirs;
        int ctl_mine, ctl_theirs;
        if (ring_pair(64 * 1024, spin_ns, &mine, &theirs, &ctl_mine, &ctl_theirs) != 0) return -1;
        pid_t pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            close(ctl_mine);
            char b[MSG_BYTES];
            for (int i = 0; i < rounds; i++)
                if (ring_read_full(theirs, b, sizeof b) != 0 || ring_write_full(theirs, b, sizeof b) != 0) _exit(1);
            _exit(0);
        }
        close(ctl_theirs);
        int failed = 0;
        for (int i = 0; i < rounds && !failed; i++) {
            double t = now_us();
            failed = ring_write_full(mine, buf, sizeof buf) != 0 || ring_read_full(mine, buf, sizeof buf) != 0;
            samples[i] = now_us() - t;
        }
        close(ctl_mine);
        int status;
        waitpid(pid, &status, 0);
        herd_shm_close(mine);
        herd_shm_close(theirs);
        return failed ? -1 : 0;
    }
    int a, b;
    if (socket_pair(kind, &a, &b) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(a);
        char m[MSG_BYTES];
        struct herd_spin spin;
        herd_spin_init(&spin, spin_ns);
        for (int i = 0; i < rounds; i++)
            if (spin_read_full(b, m, sizeof m, &spin) != 0 || write_full(b, m, sizeof m) != 0) _exit(1);
        _exit(0);
    }
    close(b);
    struct herd_spin spin;
    herd_spin_init(&spin, spin_ns);
    int failed = 0;
    for (int i = 0; i < rounds && !failed; i++) {
        double t = now_us();
        failed = write_full(a, buf, sizeof buf) != 0 || spin_read_full(a, buf, sizeof buf, &spin) != 0;
        samples[i] = now_us() - t;
    }
    close(a);
    int status;
    waitpid(pid, &status, 0);
    return failed ? -1 : 0;
}

/* Seconds to stream total bytes to the child in messages of msg bytes,
   the child answering one byte at the end; -1 on failure. sndbuf, when
   positive, is the send buffer asked for on both ends of a socket: the
   one herd asks for on that transport, so floor and herd move bytes
   through the same kernel buffers. The reader spins for up to spin_ns
   before it blocks (the caller passes herd's spinNanos, so the floor
   waits as herd's worker does). */
double herd_stream_floor(int kind, long total, long msg, int sndbuf, long spin_ns)
{
    char *buf = malloc((size_t)msg);
    if (buf == NULL) return -1;
    memset(buf, 1, (size_t)msg);
    double secs = -1;
    if (kind == 2) {
        struct herd_shm *mine, *theirs;
        int ctl_mine, ctl_theirs;
        if (ring_pair(1024 * 1024, spin_ns, &mine, &theirs, &ctl_mine, &ctl_theirs) != 0) { free(buf); return -1; }
        pid_t pid = fork();
        if (pid == 0) {
            close(ctl_mine);
            for (long got = 0; got < total; got += msg)
                if (ring_read_full(theirs, buf, (size_t)msg) != 0) _exit(1);
            char done = 1;
            _exit(ring_write_full(theirs, &done, 1) == 0 ? 0 : 1);
        }
        close(ctl_theirs);
        double t = now_us();
        int ok = pid > 0;
        for (long put = 0; ok && put < total; put += msg) ok = ring_write_full(mine, buf, (size_t)msg) == 0;
        char done;
        if (ok && ring_read_full(mine, &done, 1) == 0) secs = (now_us() - t) / 1e6;
        close(ctl_mine);
        if (pid > 0) waitpid(pid, NULL, 0);
        herd_shm_close(mine);
        herd_shm_close(theirs);
    } else {
        int a, b;
        if (socket_pair(kind, &a, &b) != 0) { free(buf); return -1; }
        if (sndbuf > 0 && (setsockopt(a, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) != 0
                           || setsockopt(b, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) != 0)) {
            free(buf);
            return -1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(a);
            struct herd_spin spin;
            herd_spin_init(&spin, spin_ns);
            for (long got = 0; got < total; got += msg)
                if (spin_read_full(b, buf, (size_t)msg, &spin) != 0) _exit(1);
            char done = 1;
            _exit(write_full(b, &done, 1) == 0 ? 0 : 1);
        }
        close(b);
        double t = now_us();
        int ok = pid > 0;
        for (long put = 0; ok && put < total; put += msg) ok = write_full(a, buf, (size_t)msg) == 0;
        char done;
        if (ok && read_full(a, &done, 1) == 0) secs = (now_us() - t) / 1e6;
        close(a);
        if (pid > 0) waitpid(pid, NULL, 0);
    }
    free(buf);
    return secs;
}

/* One blocking wake-up each way between two processes, with no spinning:
   0 through an eventfd each (what herd's rings use), 1 through a futex in
   shared memory. Fills samples (microseconds). */
int herd_wakeup_floor(int mechanism, int rounds, double *samples)
{
    _Atomic uint32_t *words = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (words == MAP_FAILED) return -1;
    int e0 = eventfd(0, EFD_CLOEXEC), e1 = eventfd(0, EFD_CLOEXEC);
    if (e0 < 0 || e1 < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    uint64_t v;
    if (pid == 0) {
        for (int i = 1; i <= rounds; i++) {
            if (mechanism == 0) {
                if (read(e0, &v, 8) != 8) _exit(1);
                v = 1;
                if (write(e1, &v, 8) != 8) _exit(1);
            } else {
                while (atomic_load(&words[0]) != (uint32_t)i)
                    syscall(SYS_futex, &words[0], FUTEX_WAIT, (uint32_t)(i - 1), NULL, NULL, 0);
                atomic_store(&words[16], (uint32_t)i);
                syscall(SYS_futex, &words[16], FUTEX_WAKE, 1, NULL, NULL, 0);
            }
        }
        _exit(0);
    }
    for (int i = 1; i <= rounds; i++) {
        double t = now_us();
        if (mechanism == 0) {
            v = 1;
            if (write(e0, &v, 8) != 8 || read(e1, &v, 8) != 8) break;
        } else {
            atomic_store(&words[0], (uint32_t)i);
            syscall(SYS_futex, &words[0], FUTEX_WAKE, 1, NULL, NULL, 0);
            while (atomic_load(&words[16]) != (uint32_t)i)
                syscall(SYS_futex, &words[16], FUTEX_WAIT, (uint32_t)(i - 1), NULL, NULL, 0);
        }
        samples[i - 1] = now_us() - t;
    }
    waitpid(pid, NULL, 0);
    close(e0);
    close(e1);
    munmap((void *)words, 4096);
    return 0;
}
