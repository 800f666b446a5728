/* caffe2py CUDA emulator: the structures shared by the runtime library, the kernel
 * libraries (through c2emu.h) and Python (ctypes mirrors them in runtime.py).
 * Plain C layout; bump C2EMU_ABI_VERSION on any change. */
#ifndef C2EMU_ABI_H
#define C2EMU_ABI_H
#include <stddef.h>
#include <stdint.h>

#define C2EMU_ABI_VERSION 3
#define C2EMU_WARP 32
#define C2EMU_MAX_THREADS 1024
/* The dynamic shared memory window of a kernel library (an H100's per-block maximum). */
#define C2EMU_MAX_DYNAMIC_SHARED (227 * 1024)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { unsigned int x, y, z; } c2emu_uint3;

/* threadIdx & co. of the thread that runs now (one runs at a time). */
typedef struct {
    c2emu_uint3 thread_idx, block_idx, block_dim, grid_dim;
} c2emu_thread_state;

/* One kernel parameter: where it sits in the packed parameter buffer (CUDA's layout:
 * each parameter at its own alignment) and what it is. kind: 'P' pointer, 'i' signed
 * integer, 'u' unsigned integer, 'b' bool, 'f' float, 'd' double, 'h' __half, 's' any
 * other by-value type (a struct). */
typedef struct {
    unsigned int offset, size, align;
    char kind;
} c2emu_param;

typedef struct {
    const char* name;
    void (*call)(const unsigned char* params);
    unsigned int n_params;
    void (*describe)(c2emu_param* out); /* fills n_params entries */
    unsigned int params_size;           /* end of the last parameter */
} c2emu_kernel;

/* Warp-collective operations (shuffles, votes, match, reduce, __syncwarp). */
enum {
    C2EMU_SHFL_IDX = 1, C2EMU_SHFL_UP, C2EMU_SHFL_DOWN, C2EMU_SHFL_XOR,
    C2EMU_VOTE_ALL, C2EMU_VOTE_ANY, C2EMU_VOTE_UNI, C2EMU_BALLOT,
    C2EMU_SYNCWARP, C2EMU_MATCH_ANY, C2EMU_MATCH_ALL,
    C2EMU_REDUCE_ADD, C2EMU_REDUCE_MIN, C2EMU_REDUCE_MAX, C2EMU_REDUCE_UMIN, C2EMU_REDUCE_UMAX,
    C2EMU_REDUCE_AND, C2EMU_REDUCE_OR, C2EMU_REDUCE_XOR
};

typedef struct {
    int kind;
    unsigned int mask;
    int width;
    int arg;                      /* source lane, delta or lane mask of a shuffle */
    unsigned long long value;     /* this lane's operand (bits) */
    int pred;                     /* this lane's predicate (votes) */
    unsigned long long result;    /* filled by the runtime */
    int result_pred;
} c2emu_warp_op;

/* Block barriers: __syncthreads and its reductions. */
enum { C2EMU_BAR_SYNC = 1, C2EMU_BAR_COUNT, C2EMU_BAR_AND, C2EMU_BAR_OR };

/* Scheduling of the threads of a block between barriers, and of the blocks. */
enum { C2EMU_ORDER_FORWARD = 0, C2EMU_ORDER_REVERSE = 1, C2EMU_ORDER_SHUFFLE = 2 };

typedef struct {
    const char* kernel_name;
    void (*call)(const unsigned char* params);
    const unsigned char* params;
    size_t params_size;
    unsigned int grid[3], block[3];
    uintptr_t shared_lo;          /* the library's shared memory (its TLS block) */
    size_t shared_len;
    uintptr_t dynamic_lo;         /* its extern __shared__ window (0 when none) */
    size_t dynamic_len;           /* bytes the launch asked for */
    size_t dynamic_capacity;      /* bytes the window holds */
    int order;
    unsigned long long seed;
    double timeout_s;
} c2emu_launch_desc;

enum {
    C2EMU_OK = 0,
    C2EMU_ERR_OUT_OF_BOUNDS,   /* device buffer redzone */
    C2EMU_ERR_FREED,           /* a freed device buffer */
    C2EMU_ERR_UNALLOCATED,     /* device memory never allocated (between buffers) */
    C2EMU_ERR_WILD,            /* not device, shared, global or stack memory */
    C2EMU_ERR_NULL,
    C2EMU_ERR_SHARED,          /* past the shared memory the launch has */
    C2EMU_ERR_GLOBAL,          /* past a __device__ / __constant__ variable */
    C2EMU_ERR_MISALIGNED,
    C2EMU_ERR_DEADLOCK,
    C2EMU_ERR_WARP,            /* misuse of a warp-collective operation */
    C2EMU_ERR_CRASH,           /* a signal (fault, integer division by zero) */
    C2EMU_ERR_TIMEOUT,
    C2EMU_ERR_TRAP,
    C2EMU_ERR_LAUNCH,          /* bad launch configuration */
    C2EMU_ERR_OUT_OF_MEMORY
};

typedef struct {
    int kind;
    int is_write;
    uintptr_t address;
    size_t size;
    int in_kernel;             /* block and thread are meaningful */
    unsigned int block[3], thread[3];
    char detail[512];
} c2emu_error;

#ifdef __cplusplus
}
#endif
#endif
