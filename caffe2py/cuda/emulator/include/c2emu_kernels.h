// caffe2py CUDA emulator: the table a kernel library exports. The generated wrapper
// of a .cu source includes the source, then lists its kernels with C2EMU_ENTRY: each
// entry unpacks the launch's parameter buffer (CUDA's layout: every parameter at its
// own alignment, in order) into the kernel's own parameter types and calls it, and
// describes that layout so the host can check its argument format against it.
#pragma once
#include <cstring>
#include <tuple>
#include <type_traits>

namespace c2emu {

template <class T> constexpr char param_kind() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_pointer_v<U>) return 'P';
    else if constexpr (std::is_same_v<U, bool>) return 'b';
    else if constexpr (std::is_same_v<U, float>) return 'f';
    else if constexpr (std::is_same_v<U, double>) return 'd';
    else if constexpr (std::is_same_v<U, __half>) return 'h';
    else if constexpr (std::is_enum_v<U>) return std::is_signed_v<std::underlying_type_t<U>> ? 'i' : 'u';
    else if constexpr (std::is_integral_v<U>) return std::is_signed_v<U> ? 'i' : 'u';
    else return 's';
}

template <class T> constexpr size_t align_up(size_t off) { return (off + alignof(T) - 1) / alignof(T) * alignof(T); }

template <class... A> struct Params {
    static constexpr unsigned n = sizeof...(A);
    static constexpr unsigned size() {
        size_t off = 0;
        ((off = align_up<std::remove_cv_t<A>>(off) + sizeof(A)), ...);
        return (unsigned)off;
    }
    static void describe(c2emu_param* out) {
        size_t off = 0;
        unsigned i = 0;
        ((off = align_up<std::remove_cv_t<A>>(off),
          out[i++] = c2emu_param{(unsigned)off, (unsigned)sizeof(A), (unsigned)alignof(std::remove_cv_t<A>),
                                 param_kind<A>()},
          off += sizeof(A)),
         ...);
        (void)out;
        (void)i;
    }
    template <class F> static void call(F f, const unsigned char* p) {
        std::tuple<std::remove_cv_t<A>...> args;
        size_t off = 0;
        std::apply([&](auto&... a) {
            ((off = align_up<std::remove_reference_t<decltype(a)>>(off),
              std::memcpy((void*)&a, p + off, sizeof(a)), off += sizeof(a)),
             ...);
        }, args);
        (void)p;
        std::apply(f, args);
    }
};

template <class F, F f> struct Kernel;
template <class... A, void (*f)(A...)> struct Kernel<void (*)(A...), f> : Params<A...> {
    static void call(const unsigned char* p) { Params<A...>::call(f, p); }
};
template <class... A, void (*f)(A...) noexcept> struct Kernel<void (*)(A...) noexcept, f> : Params<A...> {
    static void call(const unsigned char* p) { Params<A...>::call(f, p); }
};

}  // namespace c2emu

#define C2EMU_ENTRY(name)                                                                          \
    {#name, &::c2emu::Kernel<decltype(&name), &name>::call, ::c2emu::Kernel<decltype(&name), &name>::n, \
     &::c2emu::Kernel<decltype(&name), &name>::describe, ::c2emu::Kernel<decltype(&name), &name>::size()},

#define C2EMU_EXPORT extern "C" __attribute__((visibility("default")))

// Device-side assert(): the failing thread ends the launch with an error naming the
// expression, instead of aborting the process.
extern "C" __attribute__((visibility("hidden"), noreturn)) void __assert_fail(
    const char* expr, const char* file, unsigned int line, const char* function) noexcept {
    char text[400];
    snprintf(text, sizeof text, "assert(%s) failed at %s:%u in %s", expr, file, line, function);
    c2emu_trap(text);
    __builtin_trap();
}
