/* Big byte buffers outside the GHC heap, for the farm's argument tables
 * and result arenas: memory the garbage collector never scans or copies,
 * backed by transparent huge pages where the kernel allows (madvise mode),
 * and grown by mremap, which moves page tables instead of copying bytes.
 * Measured on the 2-core VM: first-touch page faults on small pages cost
 * about a third of the master's time at millions of tasks per second. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include "herd_big.h"

#define HUGE ((size_t)2 << 20)
#define PAGE ((size_t)4096)

static size_t round_to(size_t n, size_t unit)
{
    return (n + unit - 1) & ~(unit - 1);
}

/* A buffer below 2 MiB takes small pages: a huge page would be zeroed in
 * full on its first touch, a cost a farm of ten tasks should not pay. */
static size_t rounded(size_t n)
{
    return n < HUGE ? round_to(n == 0 ? 1 : n, PAGE) : round_to(n, HUGE);
}

/* A mapping of at least size bytes; from 2 MiB on, a multiple of 2 MiB
 * aligned to 2 MiB so that huge pages can back all of it. Its size in
 * *actual; NULL if the kernel refuses. */
void *herd_big_alloc(size_t size, size_t *actual)
{
    size_t want = rounded(size);
    if (want < HUGE) {
        void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        *actual = want;
        return p;
    }
    uint8_t *raw = mmap(NULL, want + HUGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t start = ((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
    size_t head = start - (uintptr_t)raw;
    if (head > 0)
        munmap(raw, head);
    if (HUGE - head > 0)
        munmap((uint8_t *)start + want, HUGE - head);
    madvise((void *)start, want, MADV_HUGEPAGE);   /* advice: ignored where unsupported */
    *actual = want;
    return (void *)start;
}

/* Grow a mapping from herd_big_alloc to at least size bytes, keeping its
 * contents (it may move); the new size in *actual. NULL if the kernel
 * refuses (the old mapping is then untouched). */
void *herd_big_grow(void *p, size_t old_size, size_t size, size_t *actual)
{
    size_t want = rounded(size);
    if (want <= old_size) {
        *actual = old_size;
        return p;
    }
    void *q = mremap(p, old_size, want, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        return NULL;
    if (want >= HUGE)
        madvise(q, want, MADV_HUGEPAGE);
    *actual = want;
    return q;
}

void herd_big_free(void *p, size_t size)
{
    munmap(p, size);
}
