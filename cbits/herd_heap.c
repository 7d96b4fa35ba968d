/* The master's hold on its heap: raise the runtime's minimum old
 * generation (the RTS option -O) from inside the program. The collector
 * reads it at every major collection: the old generation grows to at
 * least this much before one, and memory is given back to the system only
 * beyond a few times this much (see Herd.HeapReserve). */
#include "Rts.h"

/* Raise the minimum old generation to at least this many bytes (never
 * lower it: a larger value set with +RTS -O stays). Returns the value in
 * force afterwards, in bytes. */
size_t herd_raise_min_old_gen(size_t bytes)
{
    size_t blocks = bytes / BLOCK_SIZE;
    if (blocks > RtsFlags.GcFlags.minOldGenSize && blocks <= 0xffffffffu)
        RtsFlags.GcFlags.minOldGenSize = (uint32_t)blocks;
    return (size_t)RtsFlags.GcFlags.minOldGenSize * BLOCK_SIZE;
}
