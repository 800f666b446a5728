// How to run the threads of an emulated CUDA block so that __syncthreads means what it
// means on a GPU: measured here for the three designs considered for the emulator
// (benchmarks/emulator_scheduling.py builds and runs this; results in RESULTS.md).
//   threads   one OS thread per CUDA thread, a std::barrier per block
//   ucontext  one fiber per CUDA thread, switched with swapcontext (saves the signal mask: a syscall)
//   asm       one fiber per CUDA thread, switched by 20 lines of x86-64 assembly (what the emulator uses)
// Each CUDA thread runs `phases` barrier phases; the time per thread per phase is the
// cost of one barrier crossing (two switches for fibers).
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <ucontext.h>
#include <vector>

static volatile long sink;

static double threads_design(int n, int phases) {
    std::barrier sync(n);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i)
        ts.emplace_back([&, i] {
            long acc = i;
            for (int p = 0; p < phases; ++p) { acc += p; sync.arrive_and_wait(); }
            sink = acc;
        });
    for (auto& t : ts) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- fibers with swapcontext
static ucontext_t uc_sched;
static std::vector<ucontext_t> uc_fibers;
static int uc_phases;
static void uc_body(int i) {
    long acc = i;
    for (int p = 0; p < uc_phases; ++p) { acc += p; swapcontext(&uc_fibers[i], &uc_sched); }
    sink = acc;
}
static double ucontext_design(int n, int phases) {
    uc_phases = phases;
    uc_fibers.assign(n, ucontext_t{});
    std::vector<std::vector<char>> stacks(n, std::vector<char>(64 * 1024));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
        getcontext(&uc_fibers[i]);
        uc_fibers[i].uc_stack.ss_sp = stacks[i].data();
        uc_fibers[i].uc_stack.ss_size = stacks[i].size();
        uc_fibers[i].uc_link = &uc_sched;
        makecontext(&uc_fibers[i], (void (*)())uc_body, 1, i);
    }
    for (int p = 0; p <= phases; ++p)
        for (int i = 0; i < n; ++i) swapcontext(&uc_sched, &uc_fibers[i]);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- fibers with a hand-written switch (callee-saved registers, MXCSR, x87 control word)
extern "C" void bench_switch(void** save, void* to);
asm(R"(
    .text
    .type bench_switch,@function
bench_switch:
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
)");
static void* asm_sched;
static std::vector<void*> asm_sp;
static int asm_phases, asm_current;
static void asm_body() {
    int i = asm_current;
    long acc = i;
    for (int p = 0; p < asm_phases; ++p) { acc += p; bench_switch(&asm_sp[i], asm_sched); }
    sink = acc;
    for (;;) bench_switch(&asm_sp[i], asm_sched);
}
static double asm_design(int n, int phases) {
    asm_phases = phases;
    asm_sp.assign(n, nullptr);
    std::vector<std::vector<char>> stacks(n, std::vector<char>(64 * 1024));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
        uint64_t* sp = (uint64_t*)(((uintptr_t)(stacks[i].data() + stacks[i].size())) & ~(uintptr_t)15);
        *--sp = 0;
        *--sp = (uint64_t)&asm_body;
        for (int r = 0; r < 6; ++r) *--sp = 0;
        *--sp = 0;
        uint32_t mxcsr = 0x1F80;
        uint16_t cw = 0x037F;
        std::memcpy(sp, &mxcsr, 4);
        std::memcpy((char*)sp + 4, &cw, 2);
        asm_sp[i] = sp;
    }
    for (int p = 0; p <= phases; ++p)
        for (int i = 0; i < n; ++i) { asm_current = i; bench_switch(&asm_sched, asm_sp[i]); }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 256, phases = argc > 2 ? atoi(argv[2]) : 2000;
    double t;
    t = threads_design(n, phases / 10);
    printf("threads  %4d CUDA threads: %8.1f ns per thread per barrier\n", n, t / (double(n) * (phases / 10)) * 1e9);
    t = ucontext_design(n, phases);
    printf("ucontext %4d CUDA threads: %8.1f ns per thread per barrier\n", n, t / (double(n) * phases) * 1e9);
    t = asm_design(n, phases);
    printf("asm      %4d CUDA threads: %8.1f ns per thread per barrier\n", n, t / (double(n) * phases) * 1e9);
}
