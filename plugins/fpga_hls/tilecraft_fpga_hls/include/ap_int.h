// ap_int.h: the subset of Xilinx's arbitrary-precision integers tilecraft's generated HLS C++
// uses, for C-simulation with a plain C++ compiler (Vitis HLS brings its own header).
//
// ap_int<W> / ap_uint<W> (1 <= W <= 64) hold a W-bit two's-complement / unsigned value in the
// smallest C integer that fits, so an array of ap_int<8> is laid out as int8 (the C-simulation
// harness passes numpy buffers directly). Every construction and assignment wraps the value to
// W bits, as Xilinx's types do; arithmetic converts to a C integer first (int up to 32 bits).
#ifndef TILECRAFT_AP_INT_H
#define TILECRAFT_AP_INT_H

#include <cstdint>
#include <type_traits>

namespace tc_ap {

template <int W, bool Signed>
struct storage {
    static_assert(W >= 1 && W <= 64, "ap_int width must be 1..64 bits");
    using type = std::conditional_t<
        (W <= 8), std::conditional_t<Signed, std::int8_t, std::uint8_t>,
        std::conditional_t<
            (W <= 16), std::conditional_t<Signed, std::int16_t, std::uint16_t>,
            std::conditional_t<(W <= 32), std::conditional_t<Signed, std::int32_t, std::uint32_t>,
                               std::conditional_t<Signed, std::int64_t, std::uint64_t>>>>;
    // what arithmetic on the value runs in: int while every value fits
    using value = std::conditional_t<(W < 32 || (W == 32 && Signed)), int,
                                     std::conditional_t<Signed, long long, unsigned long long>>;
};

template <int W, bool Signed>
inline long long wrap(long long v) {
    if (W >= 64) return v;
    const unsigned long long mask = (1ull << W) - 1ull;
    unsigned long long bits = static_cast<unsigned long long>(v) & mask;
    if (Signed && (bits >> (W - 1)) & 1ull) bits |= ~mask;  // sign-extend
    return static_cast<long long>(bits);
}

template <int W, bool Signed>
class ap_int_base {
public:
    using storage_type = typename storage<W, Signed>::type;
    using value_type = typename storage<W, Signed>::value;

    ap_int_base() : v_(0) {}
    template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
    ap_int_base(T value) : v_(static_cast<storage_type>(wrap<W, Signed>(static_cast<long long>(value)))) {}
    // a float converts by truncation toward zero, as Xilinx's does
    ap_int_base(double value) : ap_int_base(static_cast<long long>(value)) {}
    ap_int_base(float value) : ap_int_base(static_cast<long long>(value)) {}
    template <int W2, bool S2>
    ap_int_base(const ap_int_base<W2, S2>& other) : ap_int_base(static_cast<long long>(other.value())) {}

    operator value_type() const { return static_cast<value_type>(v_); }
    value_type value() const { return static_cast<value_type>(v_); }
    static constexpr int width = W;

private:
    storage_type v_;
};

}  // namespace tc_ap

template <int W>
class ap_int : public tc_ap::ap_int_base<W, true> {
public:
    using tc_ap::ap_int_base<W, true>::ap_int_base;
    ap_int() = default;
};

template <int W>
class ap_uint : public tc_ap::ap_int_base<W, false> {
public:
    using tc_ap::ap_int_base<W, false>::ap_int_base;
    ap_uint() = default;
};

static_assert(sizeof(ap_int<8>) == 1 && sizeof(ap_uint<8>) == 1 && sizeof(ap_int<32>) == 4,
              "ap_int<W> arrays must be laid out like the C integers numpy uses");

#endif  // TILECRAFT_AP_INT_H
