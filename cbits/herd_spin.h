/* The adaptive spin a reader makes before it blocks, the same on every
   transport (shared rings, Unix and TCP sockets) and in the C floor of
   herd's latency benchmark.

   A round trip of two blocking wake-ups across CPUs cost 15-21 us on the
   2-core VM herd is measured on (herd bench latency, 2026-11-24; 60-120
   us on earlier days); a reader that is still spinning when the bytes
   come pays none of it (a Unix-socket round trip in C: 28.8 us blocking, 8.5 us with
   a 20 us spin at both ends; TCP: 31.2 and 12.6). Spinning costs a core,
   so it adapts: after four spins in a row that found nothing a reader
   stops spinning, tries again on every 16th wait, and starts again at
   once when a blocking wait shows that bytes came within the spin's
   length of its start. */
#ifndef HERD_SPIN_H
#define HERD_SPIN_H
#include <time.h>

#define HERD_SPIN_MISSES_BEFORE_PAUSE 4

struct herd_spin {
    long spin_ns;
    int misses;          /* spins in a row that found nothing */
    unsigned skipped;    /* waits since spinning was paused */
};

static inline long herd_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline void herd_spin_init(struct herd_spin *s, long spin_ns)
{
    s->spin_ns = spin_ns;
    s->misses = 0;
    s->skipped = 0;
}

/* Whether to spin before this wait; the deadline in *deadline if so. */
static inline int herd_spin_begin(struct herd_spin *s, long *deadline)
{
    if (s->spin_ns <= 0) return 0;
    if (s->misses >= HERD_SPIN_MISSES_BEFORE_PAUSE && (++s->skipped & 15) != 0) return 0;
    *deadline = herd_now_ns() + s->spin_ns;
    return 1;
}

static inline void herd_spin_found(struct herd_spin *s) { s->misses = 0; }
static inline void herd_spin_missed(struct herd_spin *s) { s->misses++; }

/* A blocking wait that began at start has ended with bytes. */
static inline void herd_spin_waited(struct herd_spin *s, long start)
{
    if (herd_now_ns() - start < s->spin_ns) s->misses = 0;
}
#endif
