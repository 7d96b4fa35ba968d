#ifndef HERD_BIG_H
#define HERD_BIG_H
#include <stddef.h>
void *herd_big_alloc(size_t size, size_t *actual);
void *herd_big_grow(void *p, size_t old_size, size_t size, size_t *actual);
void herd_big_free(void *p, size_t size);
#endif
