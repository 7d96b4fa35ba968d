/* Shared-memory links between a master and a worker on one host.

   One link is one anonymous shared mapping (a memfd: it has no name in any
   file system, so nothing is left behind whoever dies) holding two
   single-producer single-consumer byte rings, one per direction. Each ring
   is a header page and a power-of-two data area. Indices are free-running
   64-bit byte counts: the writer owns the tail, the reader the head.

   Neither side trusts the other's index: each keeps its own index in
   private memory, and reads the other's from the mapping and checks it
   (the bytes available, tail - head, must be at most the capacity; a peer
   that breaks this is a bad peer and the ring is marked broken). Bytes are
   copied out of the ring before anything reads them, so a peer cannot
   change them after they were checked. The memfd is sealed against
   shrinking and growing, so a peer cannot make the mapping fault.

   Wake-ups cost nothing while the reader is already busy: a reader spins
   for a short while (the adaptive spin of herd_spin.h, shared with the
   socket transports), then raises a flag in the ring header and blocks in
   poll() on its eventfd together with the control socket, whose end of
   file is how the death of the peer shows. A writer signals the eventfd
   only when it finds the flag raised. A writer that finds the ring full
   waits on a futex in the header, with a timeout so that a peer's death
   is noticed. The spin is its own call, herd_shm_spin, so that GHC can
   make it an unsafe call: a safe one gives up the runtime for the
   duration, and taking it back after a short spin cost more than the spin
   saved.

   Eventfd versus futex for the data wake-up: on this machine a blocking
   futex round trip measured slightly cheaper, but only a descriptor can be
   waited on together with the control socket, by epoll in the master's
   loop, and by GHC's IO manager; so data uses the eventfd and only the
   writer's wait for space (which waits on nothing else) uses the futex. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "herd_shm.h"
#include "herd_spin.h"

#define HEADER_BYTES 4096

struct ring_header {
    _Atomic uint64_t tail;            char pad0[56];
    _Atomic uint64_t head;            char pad1[56];
    _Atomic uint32_t reader_waiting;  char pad2[60];
    _Atomic uint32_t writer_waiting;  char pad3[60];
    _Atomic uint32_t space_seq;       char pad4[60];
};

struct herd_shm {
    uint8_t *base;
    size_t map_bytes;
    uint64_t capacity;
    struct ring_header *in_h, *out_h;
    uint8_t *in_data, *out_data;
    uint64_t in_head;    /* bytes consumed from the inbound ring (private) */
    uint64_t out_tail;   /* bytes produced into the outbound ring (private) */
    uint64_t out_head_seen; /* the reader's head as last read (private; see herd_shm_send) */
    int my_efd, peer_efd, ctl;
    struct herd_spin spin; /* the reader's adaptive spin ("herd_spin.h") */
    int check_peer;      /* a wait ended other than by bytes seen: look at the control socket */
    int peer_closed;     /* the control socket reached its end: no more bytes will come */
    int broken;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

size_t herd_shm_bytes(uint64_t capacity)
{
    return 2 * (HEADER_BYTES + (size_t)capacity);
}

int herd_shm_create(uint64_t capacity, int *fds)
{
    if (capacity < 4096 || (capacity & (capacity - 1)) != 0) return EINVAL;
    int memfd = memfd_create("herd-link", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) return errno;
    if (ftruncate(memfd, (off_t)herd_shm_bytes(capacity)) != 0
        || fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(memfd);
        return e;
    }
    int a = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int b = a < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b < 0) {
        int e = errno;
        close(memfd);
        if (a >= 0) close(a);
        return e;
    }
    fds[0] = memfd;
    fds[1] = a;
    fds[2] = b;
    return 0;
}

struct herd_shm *herd_shm_open(int memfd, uint64_t capacity, int side, int my_efd, int peer_efd,
                               int ctl, long spin_ns, int *err)
{
    struct stat st;
    size_t bytes;
    *err = 0;
    if (fstat(memfd, &st) != 0) { *err = errno; return NULL; }
    /* 0: the side that did not make the segment takes its size from it */
    if (capacity == 0 && st.st_size > 2 * HEADER_BYTES)
        capacity = (uint64_t)st.st_size / 2 - HEADER_BYTES;
    if (capacity < 4096 || (capacity & (capacity - 1)) != 0) { *err = EPROTO; return NULL; }
    bytes = herd_shm_bytes(capacity);
    if ((size_t)st.st_size != bytes) { *err = EPROTO; return NULL; }
    /* the side that did not make the segment checks it cannot shrink */
    int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) { *err = EPROTO; return NULL; }
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (base == MAP_FAILED) { *err = errno; return NULL; }
    struct herd_shm *s = calloc(1, sizeof *s);
    if (s == NULL) { munmap(base, bytes); *err = ENOMEM; return NULL; }
    uint8_t *ring0 = base, *ring1 = (uint8_t *)base + HEADER_BYTES + capacity;
    /* ring 0 carries master to worker, ring 1 worker to master */
    uint8_t *in = side == 0 ? ring1 : ring0, *out = side == 0 ? ring0 : ring1;
    s->base = base;
    s->map_bytes = bytes;
    s->capacity = capacity;
    s->in_h = (struct ring_header *)in;
    s->out_h = (struct ring_header *)out;
    s->in_data = in + HEADER_BYTES;
    s->out_data = out + HEADER_BYTES;
    s->in_head = atomic_load(&s->in_h->head);
    s->out_tail = atomic_load(&s->out_h->tail);
    s->out_head_seen = atomic_load(&s->out_h->head);
    s->my_efd = my_efd;
    s->peer_efd = peer_efd;
    s->ctl = ctl;
    herd_spin_init(&s->spin, spin_ns);
    return s;
}

void herd_shm_close(struct herd_shm *s)
{
    if (s == NULL) return;
    munmap(s->base, s->map_bytes);
    close(s->my_efd);
    close(s->peer_efd);
    free(s);
}

/* The control socket carries nothing after the rings are set up: readable
   or hung up means the peer closed it or died. */
static int peer_gone(struct herd_shm *s)
{
    struct pollfd p = { s->ctl, POLLIN, 0 };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t rc;
    do { rc = write(fd, &one, sizeof one); } while (rc < 0 && errno == EINTR);
}

static void drain_fd(int fd)
{
    uint64_t count;
    ssize_t rc;
    do { rc = read(fd, &count, sizeof count); } while (rc < 0 && errno == EINTR);
}

/* Bytes in the inbound ring, or more than the capacity when the peer's
   tail is inconsistent. */
static inline uint64_t in_available(struct herd_shm *s)
{
    return atomic_load_explicit(&s->in_h->tail, memory_order_acquire) - s->in_head;
}

long herd_shm_recv(struct herd_shm *s, uint8_t *buf, size_t n)
{
    if (s->broken) return HERD_SHM_BROKEN;
    uint64_t avail = in_available(s);
    if (avail > s->capacity) { s->broken = 1; return HERD_SHM_BROKEN; }
    if (avail == 0) {
        /* only after a wait that may have ended by the peer's death: an
           empty ring is otherwise the common case and costs no system call */
        if (s->peer_closed) return 0;
        if (!s->check_peer) return -1;
        s->check_peer = 0;
        if (!peer_gone(s)) return -1;
        /* bytes published before the peer died are still taken first */
        if (in_available(s) != 0) return herd_shm_recv(s, buf, n);
        s->peer_closed = 1;
        return 0;
    }
    size_t k = avail < n ? (size_t)avail : n;
    size_t at = (size_t)(s->in_head & (s->capacity - 1));
    size_t first = k < s->capacity - at ? k : s->capacity - at;
    memcpy(buf, s->in_data + at, first);
    memcpy(buf + first, s->in_data, k - first);
    s->in_head += k;
    atomic_store(&s->in_h->head, s->in_head);
    if (atomic_load(&s->in_h->writer_waiting) && atomic_exchange(&s->in_h->writer_waiting, 0)) {
        atomic_fetch_add(&s->in_h->space_seq, 1);
        syscall(SYS_futex, &s->in_h->space_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    return (long)k;
}

long herd_shm_send(struct herd_shm *s, const uint8_t *buf, size_t n)
{
    if (s->broken) return HERD_SHM_BROKEN;
    /* The reader's head is read again only when the head last seen leaves
       too little room. Its cache line was written by the reader at its
       last receive, so reading it on every send was a miss across cores:
       a 16-byte round trip in C took 1.0-1.1 us with that read and
       0.73-0.79 us without it on the 2-core VM herd is measured on. The
       head seen can only be behind the real one, so the room it gives is
       never too much. */
    uint64_t used = s->out_tail - s->out_head_seen;
    if (used > s->capacity || s->capacity - used < n) {
        s->out_head_seen = atomic_load_explicit(&s->out_h->head, memory_order_acquire);
        used = s->out_tail - s->out_head_seen;
    }
    if (used > s->capacity) { s->broken = 1; return HERD_SHM_BROKEN; }
    size_t room = (size_t)(s->capacity - used);
    size_t k = room < n ? room : n;
    if (k == 0) return 0;
    size_t at = (size_t)(s->out_tail & (s->capacity - 1));
    size_t first = k < s->capacity - at ? k : s->capacity - at;
    memcpy(s->out_data + at, buf, first);
    memcpy(s->out_data, buf + first, k - first);
    s->out_tail += k;
    atomic_store(&s->out_h->tail, s->out_tail);
    if (atomic_load(&s->out_h->reader_waiting) && atomic_exchange(&s->out_h->reader_waiting, 0))
        signal_fd(s->peer_efd);
    return (long)k;
}

int herd_shm_arm(struct herd_shm *s, int drain)
{
    if (drain) drain_fd(s->my_efd);
    s->check_peer = 1;
    atomic_store(&s->in_h->reader_waiting, 1);
    return s->broken || in_available(s) != 0;
}

int herd_shm_spin(struct herd_shm *s)
{
    long deadline;
    if (!herd_spin_begin(&s->spin, &deadline)) return 0;
    int spins = 0;
    for (;;) {
        if (in_available(s) != 0) { herd_spin_found(&s->spin); return 1; }
        if (++spins % 64 == 0 && herd_now_ns() > deadline) break;
        cpu_relax();
    }
    herd_spin_missed(&s->spin);
    return 0;
}

int herd_shm_wait_in(struct herd_shm *s)
{
    if (herd_shm_arm(s, 1)) return 1;
    struct pollfd p[2] = { { s->my_efd, POLLIN, 0 }, { s->ctl, POLLIN, 0 } };
    long start = herd_now_ns();
    /* bounded, so that an interruption that landed just before the poll
       is acted on within a second */
    int rc = poll(p, 2, 1000);
    s->check_peer = 1;
    if (rc < 0) return -errno;
    if (rc == 0) return 0;
    /* data came soon after the wait began: spinning would have caught it */
    herd_spin_waited(&s->spin, start);
    return 1;
}

int herd_shm_wait_out(struct herd_shm *s)
{
    for (;;) {
        uint32_t seen = atomic_load(&s->out_h->space_seq);
        atomic_store(&s->out_h->writer_waiting, 1);
        uint64_t used = s->out_tail - atomic_load(&s->out_h->head);
        if (used != s->capacity) return 1;   /* room, or inconsistent: send says which */
        if (peer_gone(s)) return 0;
        struct timespec limit = { 0, 50 * 1000 * 1000 };
        long rc = syscall(SYS_futex, &s->out_h->space_seq, FUTEX_WAIT, seen, &limit, NULL, 0);
        if (rc < 0 && errno == EINTR) return -EINTR;
    }
}

int herd_shm_fd(struct herd_shm *s)
{
    return s->my_efd;
}

/* Descriptor passing over the Unix socket the link was set up on. */
int herd_send_fds(int sock, const int *fds, int n)
{
    char byte = 'F';
    struct iovec iov = { &byte, 1 };
    union { char buf[CMSG_SPACE(sizeof(int) * 4)]; struct cmsghdr align; } control;
    if (n < 1 || n > 4) return EINVAL;
    memset(&control, 0, sizeof control);
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    for (;;) {
        if (sendmsg(sock, &msg, MSG_NOSIGNAL) == 1) return 0;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
        struct pollfd p = { sock, POLLOUT, 0 };
        if (poll(&p, 1, 5000) <= 0) return ETIMEDOUT;
    }
}

/* Receive exactly n descriptors (and their one byte) within the timeout.
   Returns 0, or an errno (EPROTO: the message did not carry n descriptors;
   any it did carry are closed). */
int herd_recv_fds(int sock, int *fds, int n, int timeout_ms)
{
    char byte;
    struct iovec iov = { &byte, 1 };
    union { char buf[CMSG_SPACE(sizeof(int) * 8)]; struct cmsghdr align; } control;
    if (n < 1 || n > 4) return EINVAL;
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct pollfd p = { sock, POLLIN, 0 };
    int ready = poll(&p, 1, timeout_ms);
    if (ready < 0) return errno;
    if (ready == 0) return ETIMEDOUT;
    ssize_t got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got < 0) return errno;
    int received = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *in = (int *)CMSG_DATA(c);
        for (int i = 0; i < count; i++) {
            if (received < n) fds[received] = in[i]; else close(in[i]);
            received++;
        }
    }
    if (got != 1 || byte != 'F' || received != n || (msg.msg_flags & MSG_CTRUNC)) {
        for (int i = 0; i < received && i < n; i++) close(fds[i]);
        return got == 0 ? ECONNRESET : EPROTO;
    }
    return 0;
}

/* One byte with a timeout: the worker's "ready for the rings". */
int herd_recv_byte(int sock, int timeout_ms)
{
    struct pollfd p = { sock, POLLIN, 0 };
    int ready = poll(&p, 1, timeout_ms);
    if (ready < 0) return -errno;
    if (ready == 0) return -ETIMEDOUT;
    unsigned char byte;
    ssize_t got = recv(sock, &byte, 1, MSG_DONTWAIT);
    if (got < 0) return -errno;
    if (got == 0) return -ECONNRESET;
    return byte;
}

int herd_send_byte(int sock, int byte)
{
    unsigned char b = (unsigned char)byte;
    struct pollfd p = { sock, POLLOUT, 0 };
    if (poll(&p, 1, 5000) <= 0) return ETIMEDOUT;
    return send(sock, &b, 1, MSG_NOSIGNAL) == 1 ? 0 : errno;
}

/* For tests: move the outbound ring's published tail as a broken writer
   would, so the reader's checks can be exercised. */
void herd_shm_damage_for_test(struct herd_shm *s, uint64_t delta)
{
    atomic_fetch_add(&s->out_h->tail, delta);
}

/* An eventfd for waking a thread blocked in epoll or poll. */
int herd_eventfd(void)
{
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return fd < 0 ? -errno : fd;
}

void herd_eventfd_signal(int fd) { signal_fd(fd); }
void herd_eventfd_drain(int fd) { drain_fd(fd); }
