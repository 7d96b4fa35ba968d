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

/* Whether a closure is in weak head normal form, without evaluating it:
 * a tagged pointer is; else a constructor is, and an indirection (an
 * updated thunk, an evaluated top-level value) is if what it points to
 * is. A thunk, a thunk under evaluation, a function or anything else
 * counts as not (callers treat that as "maybe not ready"). Called by
 * Herd.Evaluated with no allocation between taking the pointer and this
 * call, so no garbage collection can move the closure meanwhile. */
StgInt herd_whnf(StgClosure *p)
{
    for (int hops = 0; hops < 8; hops++) {
        if (GET_CLOSURE_TAG(p) != 0)
            return 1;
        const StgInfoTable *info = get_itbl(p);
        switch (info->type) {
        case CONSTR: case CONSTR_1_0: case CONSTR_0_1: case CONSTR_2_0:
        case CONSTR_1_1: case CONSTR_0_2: case CONSTR_NOCAF:
            return 1;
        case IND: case IND_STATIC:
            p = ((StgInd *)p)->indirectee;
            break;
        case BLACKHOLE: {
            StgClosure *r = ((StgInd *)p)->indirectee;
            if (GET_CLOSURE_TAG(r) != 0)
                return 1;
            /* a thread evaluating it right now */
            const StgInfoTable *ri = get_itbl(r);
            if (ri->type == TSO || ri->type == BLOCKING_QUEUE || ri->type == WHITEHOLE)
                return 0;
            p = r;
            break;
        }
        default:
            return 0;
        }
    }
    return 0;
}
