// caffe2py CUDA emulator runtime: device memory with a shadow map, the per-access
// checks the kernel libraries are instrumented with (GCC's address-sanitizer
// callbacks, implemented here), and launches that run every block with one fiber per
// CUDA thread on the calling OS thread. A fiber runs until it reaches a barrier or a
// warp-collective operation; when every thread of the block waits, the runtime
// completes the barriers and collectives whose participants have all arrived, in the
// thread order the launch asked for (forward, reversed or shuffled with a seed).
//
// Built by caffe2py.cuda.emulator.build with g++ -std=c++20 (no sanitizer on this file).
#include "c2emu_abi.h"

#include <algorithm>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <link.h>
#include <map>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

// ----------------------------------------------------------------------------- state

EXPORT c2emu_thread_state c2emu_current = {};  // an initialiser: a definition, not a declaration

namespace {

enum FiberState { RUNNABLE, AT_BARRIER, AT_WARP_OP, EXITED };

struct Fiber {
    void* sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
    char* stack_lo = nullptr;  // usable stack (above the guard page)
    size_t stack_len = 0;
    int state = EXITED;
    unsigned linear = 0;
    c2emu_uint3 tid{};
    c2emu_warp_op* op = nullptr;
    int bar_kind = 0, bar_pred = 0, bar_result = 0;
};

const size_t kStackSize = 256 * 1024;
const size_t kGuard = 4096;

struct Global {
    uintptr_t beg;
    size_t size, size_with_redzone;
    const char* name;
};

struct Runtime {
    // device memory
    uintptr_t arena_lo = 0;
    size_t arena_len = 0;
    uint8_t* shadow = nullptr;
    size_t bump = 0;
    std::multimap<size_t, uintptr_t> free_blocks;  // capacity -> base
    // registered globals of the kernel libraries (__device__, __constant__, literals)
    std::vector<Global> globals;
    // the launch in progress
    bool active = false;
    pthread_t thread{};
    const c2emu_launch_desc* launch = nullptr;
    std::vector<Fiber> fibers;
    unsigned n_threads = 0;
    Fiber* cur = nullptr;
#if defined(__x86_64__)
    void* sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif
    c2emu_error error{};
    unsigned long long accesses = 0;
    double deadline = 0;
    // signal safety net during launches
    struct sigaction old_actions[4];
    stack_t old_altstack{};
    void* altstack = nullptr;
};

Runtime rt;
const int kSignals[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------- fibers

#if defined(__x86_64__)
extern "C" void c2emu_switch(void** save, void* to);
asm(R"(
    .text
    .p2align 4
    .type c2emu_switch,@function
c2emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size c2emu_switch, .-c2emu_switch
)");
#endif

[[noreturn]] void fiber_exit_to_scheduler(Fiber* f) {
    f->state = EXITED;
#if defined(__x86_64__)
    c2emu_switch(&f->sp, rt.sched_sp);
#else
    swapcontext(&f->uc, &rt.sched_uc);
#endif
    __builtin_unreachable();
}

void fiber_main() {
    Fiber* f = rt.cur;
    rt.launch->call(rt.launch->params);
    fiber_exit_to_scheduler(f);
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void yield_to_scheduler(Fiber* f) {
#if defined(__x86_64__)
    c2emu_switch(&f->sp, rt.sched_sp);
#else
    swapcontext(&f->uc, &rt.sched_uc);
#endif
}

void resume(Fiber* f) {
    rt.cur = f;
    c2emu_current.thread_idx = f->tid;
#if defined(__x86_64__)
    c2emu_switch(&rt.sched_sp, f->sp);
#else
    swapcontext(&rt.sched_uc, &f->uc);
#endif
    rt.cur = nullptr;
}

bool ensure_stacks(unsigned n) {
    while (rt.fibers.size() < n) {
        void* mem = mmap(nullptr, kStackSize + kGuard, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mem == MAP_FAILED) return false;
        mprotect(mem, kGuard, PROT_NONE);  // overflow faults instead of corrupting a neighbour
        Fiber f;
        f.stack_lo = (char*)mem + kGuard;
        f.stack_len = kStackSize;
        rt.fibers.push_back(f);
    }
    return true;
}

void start_fiber(Fiber* f) {
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)(f->stack_lo + f->stack_len)) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)top;
    *--sp = 0;                       // fiber_main's (never used) return address
    *--sp = (uint64_t)&fiber_main;   // where c2emu_switch's ret goes
    for (int i = 0; i < 6; ++i) *--sp = 0;  // rbp rbx r12 r13 r14 r15
    *--sp = 0;
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    std::memcpy((char*)sp, &mxcsr, 4);
    std::memcpy((char*)sp + 4, &fpucw, 2);
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_len;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())fiber_main, 0);
#endif
    f->state = RUNNABLE;
    f->op = nullptr;
}

// ----------------------------------------------------------------------------- errors

void set_thread_coords(c2emu_error& e) {
    e.in_kernel = 1;
    e.block[0] = c2emu_current.block_idx.x;
    e.block[1] = c2emu_current.block_idx.y;
    e.block[2] = c2emu_current.block_idx.z;
    e.thread[0] = c2emu_current.thread_idx.x;
    e.thread[1] = c2emu_current.thread_idx.y;
    e.thread[2] = c2emu_current.thread_idx.z;
}

// Records the first error of the launch; inside a fiber it ends the launch there.
void fail(int kind, uintptr_t addr, size_t size, int is_write, const char* fmt = nullptr, ...)
    __attribute__((format(printf, 5, 6)));

void fail(int kind, uintptr_t addr, size_t size, int is_write, const char* fmt, ...) {
    if (rt.error.kind == C2EMU_OK) {
        rt.error.kind = kind;
        rt.error.address = addr;
        rt.error.size = size;
        rt.error.is_write = is_write;
        if (rt.cur) set_thread_coords(rt.error);
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(rt.error.detail, sizeof rt.error.detail, fmt, ap);
            va_end(ap);
        }
    }
    if (rt.cur) fiber_exit_to_scheduler(rt.cur);
}

// ----------------------------------------------------------------------------- checks

// Shadow bytes, one per 8 bytes of the arena: 0 never allocated, 1..8 the first k
// bytes of the granule are addressable, kRedzone past a buffer's end, kFreed freed.
const uint8_t kRedzone = 0xFA, kFreed = 0xFD;

const Global* find_global(uintptr_t a) {
    auto& g = rt.globals;
    size_t lo = 0, hi = g.size();
    while (lo < hi) {  // last global with beg <= a
        size_t mid = (lo + hi) / 2;
        if (g[mid].beg <= a) lo = mid + 1; else hi = mid;
    }
    if (lo == 0) return nullptr;
    const Global& cand = g[lo - 1];
    return a < cand.beg + cand.size_with_redzone ? &cand : nullptr;
}

void check_arena(uintptr_t a, size_t n, int is_write) {
    size_t off = a - rt.arena_lo;
    if (off + n > rt.arena_len) fail(C2EMU_ERR_UNALLOCATED, a, n, is_write);
    for (size_t g = off >> 3, last = (off + n - 1) >> 3; g <= last; ++g) {
        uint8_t s = rt.shadow[g];
        if (s == 8) continue;
        if (s >= 1 && s < 8) {
            size_t end_in_granule = std::min(off + n, (g + 1) * 8) - g * 8;  // bytes touched up to
            if (end_in_granule <= s) continue;
            fail(C2EMU_ERR_OUT_OF_BOUNDS, a, n, is_write);
        }
        fail(s == kFreed ? C2EMU_ERR_FREED : s == kRedzone ? C2EMU_ERR_OUT_OF_BOUNDS : C2EMU_ERR_UNALLOCATED,
             a, n, is_write);
    }
}

inline void check_access(uintptr_t a, size_t n, int is_write) {
    if (!rt.active || !rt.cur || !pthread_equal(pthread_self(), rt.thread)) return;
    if ((++rt.accesses & 0xFFFFF) == 0 && now_s() > rt.deadline)
        fail(C2EMU_ERR_TIMEOUT, 0, 0, 0, "the launch ran past its %.0f s limit (an endless loop?)",
             rt.launch->timeout_s);
    if ((n == 2 || n == 4 || n == 8 || n == 16) && (a & (n - 1)))
        fail(C2EMU_ERR_MISALIGNED, a, n, is_write);
    if (a - rt.arena_lo < rt.arena_len) return check_arena(a, n, is_write);
    const Fiber* f = rt.cur;
    if (a - (uintptr_t)f->stack_lo < f->stack_len) return;  // the thread's own locals
    const c2emu_launch_desc* d = rt.launch;
    if (a - (uintptr_t)&c2emu_current < sizeof c2emu_current) return;
    if (a - (uintptr_t)d->params < d->params_size) return;
    if (d->dynamic_lo && a - d->dynamic_lo < d->dynamic_capacity) {
        if (a + n - d->dynamic_lo <= d->dynamic_len) return;
        fail(C2EMU_ERR_SHARED, a, n, is_write, "extern __shared__ byte %zu, but the launch gave %zu bytes",
             (size_t)(a - d->dynamic_lo), d->dynamic_len);
    }
    if (a - d->shared_lo < d->shared_len) {
        if (a + n - d->shared_lo <= d->shared_len) return;
        fail(C2EMU_ERR_SHARED, a, n, is_write, "past the end of the block's __shared__ variables");
    }
    if (const Global* g = find_global(a)) {
        if (a + n <= g->beg + g->size) return;
        fail(C2EMU_ERR_GLOBAL, a, n, is_write, "%s: byte %zu of a %zu-byte variable", g->name,
             (size_t)(a - g->beg), g->size);
    }
    if (a < 65536) fail(C2EMU_ERR_NULL, a, n, is_write);
    const uintptr_t near = 1 << 20;  // an index past a __shared__ array lands close to the block's shared memory
    if (d->shared_len && a + near >= d->shared_lo && a < d->shared_lo + d->shared_len + near)
        fail(C2EMU_ERR_SHARED, a, n, is_write, "%lld bytes from the block's %zu bytes of __shared__ variables",
             a < d->shared_lo ? -(long long)(d->shared_lo - a) : (long long)(a - d->shared_lo - d->shared_len),
             d->shared_len);
    fail(C2EMU_ERR_WILD, a, n, is_write);
}

// ----------------------------------------------------------------------------- collectives

const char* warp_op_name(int kind) {
    switch (kind) {
        case C2EMU_SHFL_IDX: return "__shfl_sync";
        case C2EMU_SHFL_UP: return "__shfl_up_sync";
        case C2EMU_SHFL_DOWN: return "__shfl_down_sync";
        case C2EMU_SHFL_XOR: return "__shfl_xor_sync";
        case C2EMU_VOTE_ALL: return "__all_sync";
        case C2EMU_VOTE_ANY: return "__any_sync";
        case C2EMU_VOTE_UNI: return "__uni_sync";
        case C2EMU_BALLOT: return "__ballot_sync";
        case C2EMU_SYNCWARP: return "__syncwarp";
        case C2EMU_MATCH_ANY: return "__match_any_sync";
        case C2EMU_MATCH_ALL: return "__match_all_sync";
        default: return "__reduce_*_sync";
    }
}

// Source lane of a shuffle (PTX shfl.sync semantics with CUDA's clamp values).
unsigned shfl_source(int kind, unsigned lane, int arg, int width) {
    unsigned segmask = (unsigned)(32 - width) & 0x1f;
    unsigned clamp = kind == C2EMU_SHFL_UP ? 0u : 0x1fu;
    unsigned min_lane = lane & segmask;
    unsigned max_lane = min_lane | (clamp & ~segmask);
    long j;
    bool ok;
    switch (kind) {
        case C2EMU_SHFL_UP: j = (long)lane - (long)(unsigned)arg; ok = j >= (long)max_lane; break;
        case C2EMU_SHFL_DOWN: j = (long)lane + (long)(unsigned)arg; ok = j <= (long)max_lane; break;
        case C2EMU_SHFL_XOR: j = (long)(lane ^ ((unsigned)arg & 0x1f)); ok = j <= (long)max_lane; break;
        default: j = (long)(min_lane | ((unsigned)arg & 0x1f & ~segmask)); ok = j <= (long)max_lane; break;
    }
    return ok ? (unsigned)j : lane;
}

unsigned long long reduce_value(int kind, unsigned long long acc, unsigned long long v) {
    unsigned a = (unsigned)acc, b = (unsigned)v;
    switch (kind) {
        case C2EMU_REDUCE_ADD: return a + b;
        case C2EMU_REDUCE_MIN: return (unsigned)std::min((int)a, (int)b);
        case C2EMU_REDUCE_MAX: return (unsigned)std::max((int)a, (int)b);
        case C2EMU_REDUCE_UMIN: return std::min(a, b);
        case C2EMU_REDUCE_UMAX: return std::max(a, b);
        case C2EMU_REDUCE_AND: return a & b;
        case C2EMU_REDUCE_OR: return a | b;
        default: return a ^ b;
    }
}

void warp_error(const Fiber* f, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

void warp_error(const Fiber* f, const char* fmt, ...) {
    if (rt.error.kind != C2EMU_OK) return;
    rt.error.kind = C2EMU_ERR_WARP;
    rt.error.in_kernel = 1;
    rt.error.block[0] = c2emu_current.block_idx.x;
    rt.error.block[1] = c2emu_current.block_idx.y;
    rt.error.block[2] = c2emu_current.block_idx.z;
    rt.error.thread[0] = f->tid.x;
    rt.error.thread[1] = f->tid.y;
    rt.error.thread[2] = f->tid.z;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt.error.detail, sizeof rt.error.detail, fmt, ap);
    va_end(ap);
}

// ----------------------------------------------------------------------------- run queue

struct Rng {
    unsigned long long s;
    unsigned long long next() {
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        return s * 2685821657736338717ULL;
    }
};

// The threads that may run. Forward order always runs the lowest-numbered one next,
// reversed the highest, shuffled a random one; a thread runs until it blocks, and a
// warp whose collective completes may go on at once, ahead of other warps.
struct RunQueue {
    int order;
    Rng* rng;
    unsigned long long bits[C2EMU_MAX_THREADS / 64] = {};
    std::vector<unsigned> items;  // shuffled order only

    void push(unsigned i) {
        if (order == C2EMU_ORDER_SHUFFLE) items.push_back(i);
        else bits[i / 64] |= 1ULL << (i % 64);
    }
    bool pop(unsigned& out) {
        if (order == C2EMU_ORDER_SHUFFLE) {
            if (items.empty()) return false;
            size_t k = rng->next() % items.size();
            out = items[k];
            items[k] = items.back();
            items.pop_back();
            return true;
        }
        const int words = C2EMU_MAX_THREADS / 64;
        if (order == C2EMU_ORDER_FORWARD) {
            for (int w = 0; w < words; ++w)
                if (bits[w]) {
                    int b = __builtin_ctzll(bits[w]);
                    bits[w] &= bits[w] - 1;
                    out = (unsigned)(w * 64 + b);
                    return true;
                }
        } else {
            for (int w = words - 1; w >= 0; --w)
                if (bits[w]) {
                    int b = 63 - __builtin_clzll(bits[w]);
                    bits[w] &= ~(1ULL << b);
                    out = (unsigned)(w * 64 + b);
                    return true;
                }
        }
        return false;
    }
};

// Completes the collectives of warp `w` whose named lanes have all arrived, making
// their lanes runnable. With `report`, misuse (a mask without the calling lane, lanes
// that exited or do not exist, lanes meeting at different operations) is an error;
// without it such groups are only left waiting. Returns true when some lane may run.
bool complete_warp(unsigned w, bool report, RunQueue& q) {
    bool progress = false;
    const unsigned base = w * 32, lanes = std::min(32u, rt.n_threads - base);
    unsigned done = 0;  // lanes handled in this pass
    for (unsigned l = 0; l < lanes; ++l) {
        Fiber* f = &rt.fibers[base + l];
        if (f->state != AT_WARP_OP || (done >> l & 1)) continue;
        const c2emu_warp_op* op = f->op;
        unsigned mask = op->mask;
        const char* name = warp_op_name(op->kind);
        if (!(mask >> l & 1)) {
            if (report) warp_error(f, "%s with mask 0x%08x, which does not name the calling lane %u", name, mask, l);
            if (report) return false;
            continue;
        }
        if (lanes < 32 && (mask >> lanes)) {
            if (report) {
                warp_error(f, "%s with mask 0x%08x names lanes %u..31, which do not exist (the block's "
                           "last warp has %u threads)", name, mask, lanes, lanes);
                return false;
            }
            continue;
        }
        bool blocked = false, bad = false;
        for (unsigned k = 0; k < lanes && !bad; ++k) {
            if (!(mask >> k & 1)) continue;
            const Fiber* g = &rt.fibers[base + k];
            if (g->state == EXITED) {
                if (report) warp_error(f, "%s with mask 0x%08x: lane %u has exited and never joins", name, mask, k);
                bad = true;
            } else if (g->state != AT_WARP_OP) {
                blocked = true;
            } else {
                const c2emu_warp_op* o = g->op;
                if (o->mask != mask || o->kind != op->kind || o->width != op->width) {
                    if (report)
                        warp_error(f, "lanes %u and %u of a warp meet at different warp operations: %s mask 0x%08x "
                                   "width %d vs %s mask 0x%08x width %d", l, k, name, mask, op->width,
                                   warp_op_name(o->kind), o->mask, o->width);
                    bad = true;
                }
            }
        }
        if (bad) {
            if (report) return false;
            continue;
        }
        if (blocked) continue;
        int width = op->width;
        bool is_shfl = op->kind >= C2EMU_SHFL_IDX && op->kind <= C2EMU_SHFL_XOR;
        if (is_shfl && (width < 1 || width > 32 || (width & (width - 1)))) {
            warp_error(f, "%s with width %d (a power of two from 1 to 32 is required)", name, width);
            return false;
        }
        unsigned long long vals[32];
        int preds[32];
        for (unsigned k = 0; k < lanes; ++k) {
            if (!(mask >> k & 1)) continue;
            vals[k] = rt.fibers[base + k].op->value;
            preds[k] = rt.fibers[base + k].op->pred;
        }
        const unsigned lead = __builtin_ctz(mask);
        unsigned ballot = 0, ones = 0;
        bool uni = true, all_equal = true;
        unsigned long long red = vals[lead];
        for (unsigned k = 0; k < lanes; ++k) {
            if (!(mask >> k & 1)) continue;
            if (preds[k]) { ballot |= 1u << k; ++ones; }
            if (k == lead) continue;
            if ((preds[k] != 0) != (preds[lead] != 0)) uni = false;
            if (vals[k] != vals[lead]) all_equal = false;
            red = reduce_value(op->kind, red, vals[k]);
        }
        for (unsigned k = 0; k < lanes; ++k) {
            if (!(mask >> k & 1)) continue;
            c2emu_warp_op* o = rt.fibers[base + k].op;
            if (is_shfl) {
                unsigned j = shfl_source(o->kind, k, o->arg, width);
                if (!(mask >> j & 1)) {
                    warp_error(&rt.fibers[base + k], "%s with mask 0x%08x: lane %u reads lane %u, which is not in the "
                               "mask (its value is undefined on a GPU)", name, mask, k, j);
                    return false;
                }
                o->result = vals[j];
            }
        }
        for (unsigned k = 0; k < lanes; ++k) {
            if (!(mask >> k & 1)) continue;
            Fiber* g = &rt.fibers[base + k];
            c2emu_warp_op* o = g->op;
            switch (o->kind) {
                case C2EMU_SHFL_IDX: case C2EMU_SHFL_UP: case C2EMU_SHFL_DOWN: case C2EMU_SHFL_XOR: break;
                case C2EMU_VOTE_ALL: o->result = ones == (unsigned)__builtin_popcount(mask); break;
                case C2EMU_VOTE_ANY: o->result = ones != 0; break;
                case C2EMU_VOTE_UNI: o->result = uni; break;
                case C2EMU_BALLOT: o->result = ballot; break;
                case C2EMU_SYNCWARP: o->result = 0; break;
                case C2EMU_MATCH_ANY: {
                    unsigned m = 0;
                    for (unsigned q2 = 0; q2 < lanes; ++q2)
                        if ((mask >> q2 & 1) && vals[q2] == vals[k]) m |= 1u << q2;
                    o->result = m;
                    break;
                }
                case C2EMU_MATCH_ALL:
                    o->result = all_equal ? mask : 0;
                    o->result_pred = all_equal;
                    break;
                default: o->result = red; break;
            }
            g->state = RUNNABLE;
            q.push(base + k);
            done |= 1u << k;
        }
        progress = true;
    }
    return progress;
}

bool complete_barrier(RunQueue& q) {
    int kind = 0, count = 0, any_arrived = 0;
    for (unsigned i = 0; i < rt.n_threads; ++i) {
        const Fiber* f = &rt.fibers[i];
        if (f->state == EXITED) continue;
        if (f->state != AT_BARRIER) return false;
        if (!any_arrived) { kind = f->bar_kind; any_arrived = 1; }
        if (f->bar_kind != kind) {
            warp_error(f, "threads meet at different barriers (__syncthreads and __syncthreads_count/and/or)");
            return false;
        }
        count += f->bar_pred != 0;
    }
    if (!any_arrived) return false;
    int alive = 0;
    for (unsigned i = 0; i < rt.n_threads; ++i) alive += rt.fibers[i].state == AT_BARRIER;
    int result = kind == C2EMU_BAR_COUNT ? count : kind == C2EMU_BAR_AND ? count == alive : count > 0;
    for (unsigned i = 0; i < rt.n_threads; ++i) {
        Fiber* f = &rt.fibers[i];
        if (f->state == AT_BARRIER) {
            f->bar_result = result;
            f->state = RUNNABLE;
            q.push(i);
        }
    }
    return true;
}

void report_deadlock() {
    if (rt.error.kind != C2EMU_OK) return;
    unsigned at_bar = 0, at_warp = 0, exited = 0;
    const Fiber* example = nullptr;
    for (unsigned i = 0; i < rt.n_threads; ++i) {
        const Fiber* f = &rt.fibers[i];
        if (f->state == AT_BARRIER) ++at_bar;
        else if (f->state == AT_WARP_OP) { ++at_warp; if (!example) example = f; }
        else ++exited;
    }
    rt.error.kind = C2EMU_ERR_DEADLOCK;
    rt.error.in_kernel = 1;
    rt.error.block[0] = c2emu_current.block_idx.x;
    rt.error.block[1] = c2emu_current.block_idx.y;
    rt.error.block[2] = c2emu_current.block_idx.z;
    if (example) {
        rt.error.thread[0] = example->tid.x;
        rt.error.thread[1] = example->tid.y;
        rt.error.thread[2] = example->tid.z;
    }
    snprintf(rt.error.detail, sizeof rt.error.detail,
             "no thread can go on: %u wait at __syncthreads, %u at warp operations%s%s (mask 0x%08x), %u have "
             "exited (a barrier or collective inside divergent code?)",
             at_bar, at_warp, example ? ", e.g. " : "", example ? warp_op_name(example->op->kind) : "",
             example ? example->op->mask : 0u, exited);
}

// ----------------------------------------------------------------------------- scheduling

void order_ids(std::vector<unsigned>& ids, int order, Rng& rng) {
    if (order == C2EMU_ORDER_REVERSE) std::reverse(ids.begin(), ids.end());
    else if (order == C2EMU_ORDER_SHUFFLE)
        for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.next() % i]);
}

void poison_shared() {
    const c2emu_launch_desc* d = rt.launch;
    if (!d->shared_len) return;
    // Shared memory starts every block as 0xFF bytes (NaN floats): reads before writes show.
    if (d->dynamic_lo && d->dynamic_lo >= d->shared_lo && d->dynamic_lo + d->dynamic_capacity <= d->shared_lo + d->shared_len) {
        std::memset((void*)d->shared_lo, 0xFF, d->dynamic_lo - d->shared_lo);
        std::memset((void*)d->dynamic_lo, 0xFF, d->dynamic_len);
        uintptr_t after = d->dynamic_lo + d->dynamic_capacity;
        std::memset((void*)after, 0xFF, d->shared_lo + d->shared_len - after);
    } else {
        std::memset((void*)d->shared_lo, 0xFF, d->shared_len);
    }
}

bool run_block(c2emu_uint3 bid, Rng& rng) {
    c2emu_current.block_idx = bid;
    const unsigned bx = rt.launch->block[0], by = rt.launch->block[1];
    RunQueue q{rt.launch->order, &rng};
    for (unsigned i = 0; i < rt.n_threads; ++i) {
        Fiber* f = &rt.fibers[i];
        f->linear = i;
        f->tid = c2emu_uint3{i % bx, (i / bx) % by, i / (bx * by)};
        start_fiber(f);
        q.push(i);
    }
    poison_shared();
    unsigned exited = 0;
    for (;;) {
        unsigned i;
        while (q.pop(i)) {
            Fiber* f = &rt.fibers[i];
            resume(f);
            if (rt.error.kind != C2EMU_OK) return false;
            if (f->state == EXITED) ++exited;
            else if (f->state == AT_WARP_OP) complete_warp(i / 32, false, q);
        }
        if (exited == rt.n_threads) return true;
        // Every thread waits: collectives that can complete now, with misuse reported.
        bool progress = false;
        for (unsigned w = 0; w * 32 < rt.n_threads; ++w) {
            progress |= complete_warp(w, true, q);
            if (rt.error.kind != C2EMU_OK) return false;
        }
        if (progress) continue;
        if (complete_barrier(q)) continue;
        if (rt.error.kind != C2EMU_OK) return false;
        report_deadlock();
        return false;
    }
}

// ----------------------------------------------------------------------------- signals

const char* signal_text(int sig, int code) {
    if (sig == SIGFPE) return code == FPE_INTDIV ? "integer division by zero (a GPU returns an undefined value)"
                                                 : "arithmetic exception";
    if (sig == SIGSEGV) return "segmentation fault";
    if (sig == SIGBUS) return "bus error";
    return "illegal instruction";
}

void on_signal(int sig, siginfo_t* si, void*) {
    if (rt.active && rt.cur && pthread_equal(pthread_self(), rt.thread)) {
        uintptr_t a = (uintptr_t)si->si_addr;
        const Fiber* f = rt.cur;
        bool overflow = sig == SIGSEGV && a < (uintptr_t)f->stack_lo && a + kGuard >= (uintptr_t)f->stack_lo;
        if (rt.error.kind == C2EMU_OK) {
            rt.error.kind = C2EMU_ERR_CRASH;
            rt.error.address = a;
            set_thread_coords(rt.error);
            snprintf(rt.error.detail, sizeof rt.error.detail, "%s",
                     overflow ? "stack overflow (the emulator gives each thread 256 KiB)" : signal_text(sig, si->si_code));
        }
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        fiber_exit_to_scheduler(rt.cur);
    }
    // Not a kernel's: put the previous handler back and let the fault happen again there.
    for (int i = 0; i < 4; ++i)
        if (kSignals[i] == sig) sigaction(sig, &rt.old_actions[i], nullptr);
}

void install_signals() {
    if (!rt.altstack) rt.altstack = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    stack_t ss{};
    ss.ss_sp = rt.altstack;
    ss.ss_size = 1 << 16;
    sigaltstack(&ss, &rt.old_altstack);
    struct sigaction sa{};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &sa, &rt.old_actions[i]);
}

void restore_signals() {
    for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &rt.old_actions[i], nullptr);
    sigaltstack(&rt.old_altstack, nullptr);
}

}  // namespace

// ----------------------------------------------------------------------------- kernel-side API

EXPORT int c2emu_barrier(int kind, int pred) {
    Fiber* f = rt.cur;
    if (!f) return 0;
    f->state = AT_BARRIER;
    f->bar_kind = kind;
    f->bar_pred = pred;
    yield_to_scheduler(f);
    return f->bar_result;
}

EXPORT void c2emu_warp(c2emu_warp_op* op) {
    Fiber* f = rt.cur;
    if (!f) return;
    f->op = op;
    f->state = AT_WARP_OP;
    yield_to_scheduler(f);
    f->op = nullptr;
}

EXPORT unsigned c2emu_activemask(void) {
    Fiber* f = rt.cur;
    if (!f) return 0;
    unsigned base = f->linear & ~31u, m = 0;
    for (unsigned k = 0; k < 32 && base + k < rt.n_threads; ++k)
        if (rt.fibers[base + k].state != EXITED) m |= 1u << k;
    return m;
}

EXPORT void c2emu_trap(const char* what) {
    fail(C2EMU_ERR_TRAP, 0, 0, 0, "%s", what ? what : "__trap()");
}

EXPORT long long c2emu_clock64(void) {
    return (long long)(now_s() * 1e9);
}

// ----------------------------------------------------------------------------- sanitizer callbacks

#define C2EMU_CB(N)                                                                              \
    EXPORT void __asan_load##N##_noabort(uintptr_t a) { check_access(a, N, 0); }                \
    EXPORT void __asan_store##N##_noabort(uintptr_t a) { check_access(a, N, 1); }               \
    EXPORT void __asan_load##N(uintptr_t a) { check_access(a, N, 0); }                          \
    EXPORT void __asan_store##N(uintptr_t a) { check_access(a, N, 1); }
C2EMU_CB(1)
C2EMU_CB(2)
C2EMU_CB(4)
C2EMU_CB(8)
C2EMU_CB(16)
EXPORT void __asan_loadN_noabort(uintptr_t a, size_t n) { if (n) check_access(a, n, 0); }
EXPORT void __asan_storeN_noabort(uintptr_t a, size_t n) { if (n) check_access(a, n, 1); }
EXPORT void __asan_loadN(uintptr_t a, size_t n) { if (n) check_access(a, n, 0); }
EXPORT void __asan_storeN(uintptr_t a, size_t n) { if (n) check_access(a, n, 1); }
EXPORT void __asan_handle_no_return(void) {}
EXPORT void __asan_before_dynamic_init(const char*) {}
EXPORT void __asan_after_dynamic_init(void) {}

struct asan_global {  // GCC's __asan_global (all eight fields: it is read as an array)
    uintptr_t beg;
    size_t size, size_with_redzone;
    const char* name;
    const char* module_name;
    size_t has_dynamic_init;
    const void* location;
    size_t odr_indicator;
};
static_assert(sizeof(asan_global) == 64, "GCC's __asan_global is 8 words");

EXPORT void __asan_register_globals(asan_global* g, size_t n) {
    for (size_t i = 0; i < n; ++i) rt.globals.push_back(Global{g[i].beg, g[i].size, g[i].size_with_redzone, g[i].name});
    std::sort(rt.globals.begin(), rt.globals.end(), [](const Global& a, const Global& b) { return a.beg < b.beg; });
}

EXPORT void __asan_unregister_globals(asan_global* g, size_t n) {
    for (size_t i = 0; i < n; ++i)
        rt.globals.erase(std::remove_if(rt.globals.begin(), rt.globals.end(),
                                        [&](const Global& x) { return x.beg == g[i].beg; }),
                         rt.globals.end());
}

// ----------------------------------------------------------------------------- host-side API

EXPORT int c2emu_abi_version(void) { return C2EMU_ABI_VERSION; }

// The registered globals of the kernel libraries (__device__ / __constant__ variables,
// literals): the host snapshots them around the order runs of a launch.
EXPORT size_t c2emu_global_count(void) { return rt.globals.size(); }

EXPORT const char* c2emu_global_at(size_t i, uintptr_t* beg, size_t* size) {
    *beg = rt.globals[i].beg;
    *size = rt.globals[i].size;
    return rt.globals[i].name;
}

EXPORT int c2emu_arena_init(size_t bytes) {
    if (rt.arena_lo) return bytes <= rt.arena_len ? 0 : -1;
    void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) return -1;
    void* s = mmap(nullptr, bytes / 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
        munmap(a, bytes);
        return -1;
    }
    rt.arena_lo = (uintptr_t)a;
    rt.arena_len = bytes;
    rt.shadow = (uint8_t*)s;
    rt.bump = 256;  // address arena_lo stays unallocated: nothing is ever at offset 0
    return 0;
}

EXPORT uintptr_t c2emu_arena_base(void) { return rt.arena_lo; }
EXPORT size_t c2emu_arena_size(void) { return rt.arena_len; }

static void shadow_set(uintptr_t base, size_t len, uint8_t v) {
    std::memset(rt.shadow + ((base - rt.arena_lo) >> 3), v, (len + 7) >> 3);
}

// Marks [base, base + nbytes) addressable, filled with 0xFF bytes, and the rest of the
// block's capacity as redzone (base and capacity are multiples of 256).
EXPORT void c2emu_mark_live(uintptr_t base, size_t nbytes, size_t capacity) {
    shadow_set(base, capacity, kRedzone);
    size_t full = nbytes >> 3;
    std::memset(rt.shadow + ((base - rt.arena_lo) >> 3), 8, full);
    if (nbytes & 7) rt.shadow[((base - rt.arena_lo) >> 3) + full] = (uint8_t)(nbytes & 7);
    std::memset((void*)base, 0xFF, nbytes);
}

EXPORT void c2emu_mark_freed(uintptr_t base, size_t capacity) { shadow_set(base, capacity, kFreed); }

// A block of `capacity` bytes (a multiple of 256), followed by a 256-byte gap that is
// never handed out; 0 when the arena is full.
static void shadow_set(uintptr_t base, size_t len, uint8_t v);

EXPORT uintptr_t c2emu_alloc(size_t capacity) {
    auto it = rt.free_blocks.find(capacity);
    if (it != rt.free_blocks.end()) {
        uintptr_t base = it->second;
        rt.free_blocks.erase(it);
        return base;
    }
    if (rt.bump + capacity + 256 > rt.arena_len) return 0;
    uintptr_t base = rt.arena_lo + rt.bump;
    rt.bump += capacity + 256;
    shadow_set(base + capacity, 256, kRedzone);  // the gap: past this block, before the next
    return base;
}

EXPORT void c2emu_free(uintptr_t base, size_t capacity) {
    shadow_set(base, capacity, 0);
    uintptr_t page = 4096, lo = (base + page - 1) & ~(page - 1), hi = (base + capacity) & ~(page - 1);
    if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);  // give the memory back
    rt.free_blocks.emplace(capacity, base);
}

// The calling thread's instance of a kernel library's thread-local block (where its
// __shared__ variables live); `touch` makes sure it has been allocated.
struct tls_query {
    uintptr_t base_addr;
    uintptr_t lo;
    size_t len;
};

static int find_tls(struct dl_phdr_info* info, size_t, void* data) {
    tls_query* q = (tls_query*)data;
    if (info->dlpi_addr != q->base_addr) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            q->lo = (uintptr_t)info->dlpi_tls_data;
            q->len = info->dlpi_phdr[i].p_memsz;
        }
    }
    return 1;
}

EXPORT int c2emu_module_tls(void (*touch)(void), uintptr_t* lo, size_t* len) {
    touch();
    Dl_info info;
    if (!dladdr((void*)touch, &info)) return -1;
    tls_query q{0, 0, 0};
    // dl_iterate_phdr reports load bias (dlpi_addr); dladdr reports the mapping base.
    struct link_map* lm = nullptr;
    if (dladdr1((void*)touch, &info, (void**)&lm, RTLD_DL_LINKMAP) && lm) q.base_addr = lm->l_addr;
    dl_iterate_phdr(find_tls, &q);
    *lo = q.lo;
    *len = q.len;
    return q.len && !q.lo ? -1 : 0;
}

EXPORT int c2emu_launch(const c2emu_launch_desc* d, c2emu_error* err) {
    rt.error = c2emu_error{};
    unsigned bx = d->block[0], by = d->block[1], bz = d->block[2];
    unsigned long long threads = (unsigned long long)bx * by * bz;
    unsigned long long blocks = (unsigned long long)d->grid[0] * d->grid[1] * d->grid[2];
    const char* bad = nullptr;
    if (!bx || !by || !bz || !d->grid[0] || !d->grid[1] || !d->grid[2]) bad = "a grid or block dimension is 0";
    else if (threads > C2EMU_MAX_THREADS || bz > 64) bad = "more than 1024 threads per block (or blockDim.z > 64)";
    else if (d->grid[1] > 65535 || d->grid[2] > 65535) bad = "gridDim.y and gridDim.z are at most 65535";
    else if (blocks > (1ull << 24)) bad = "more than 16,777,216 blocks (too many for the emulator)";
    else if (d->dynamic_len > C2EMU_MAX_DYNAMIC_SHARED) bad = "more dynamic shared memory than a block can have (227 KiB)";
    else if (d->dynamic_len && !d->dynamic_lo) bad = "dynamic shared memory for a kernel source without extern __shared__";
    if (bad) {
        rt.error.kind = C2EMU_ERR_LAUNCH;
        snprintf(rt.error.detail, sizeof rt.error.detail, "%s", bad);
        *err = rt.error;
        return rt.error.kind;
    }
    if (!ensure_stacks((unsigned)threads)) {
        rt.error.kind = C2EMU_ERR_OUT_OF_MEMORY;
        snprintf(rt.error.detail, sizeof rt.error.detail, "no memory for %llu thread stacks", threads);
        *err = rt.error;
        return rt.error.kind;
    }
    rt.launch = d;
    rt.n_threads = (unsigned)threads;
    rt.thread = pthread_self();
    rt.deadline = now_s() + d->timeout_s;
    rt.accesses = 0;
    c2emu_current.block_dim = c2emu_uint3{bx, by, bz};
    c2emu_current.grid_dim = c2emu_uint3{d->grid[0], d->grid[1], d->grid[2]};
    std::vector<unsigned> order((size_t)blocks);
    for (unsigned i = 0; i < blocks; ++i) order[i] = i;
    Rng rng{d->seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL};
    order_ids(order, d->order, rng);
    install_signals();
    rt.active = true;
    for (unsigned b : order) {
        c2emu_uint3 bid{b % d->grid[0], (b / d->grid[0]) % d->grid[1], b / (d->grid[0] * d->grid[1])};
        if (!run_block(bid, rng)) break;
    }
    rt.active = false;
    restore_signals();
    rt.launch = nullptr;
    *err = rt.error;
    return rt.error.kind;
}
