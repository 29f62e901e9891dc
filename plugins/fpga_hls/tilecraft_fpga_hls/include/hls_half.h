// hls_half.h: the subset of Xilinx's ``half`` (IEEE 754 binary16) tilecraft's generated HLS C++
// uses, for C-simulation with a plain C++ compiler. A half is two bytes (arrays of it are laid
// out as numpy's float16); it converts from float rounding to nearest-even, with overflow to
// infinity, subnormals and NaN, and widens to float exactly. Arithmetic runs in float.
#ifndef TILECRAFT_HLS_HALF_H
#define TILECRAFT_HLS_HALF_H

#include <cstdint>
#include <cstring>

class half {
public:
    half() : bits_(0) {}
    half(float value) : bits_(from_float(value)) {}
    half(double value) : bits_(from_float(static_cast<float>(value))) {}
    half(int value) : bits_(from_float(static_cast<float>(value))) {}
    operator float() const { return to_float(bits_); }

private:
    std::uint16_t bits_;

    static std::uint16_t from_float(float value) {
        std::uint32_t f;
        std::memcpy(&f, &value, 4);
        const std::uint32_t sign = (f >> 16) & 0x8000u;
        const std::uint32_t exponent = (f >> 23) & 0xffu;
        std::uint32_t mantissa = f & 0x7fffffu;
        if (exponent == 0xffu)  // infinity or NaN (kept quiet)
            return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
        const int e = static_cast<int>(exponent) - 127 + 15;
        if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
        if (e <= 0) {  // subnormal half (or zero): shift the implicit one in, then round
            if (e < -10) return static_cast<std::uint16_t>(sign);
            mantissa |= 0x800000u;
            const int shift = 14 - e;
            std::uint32_t half_mantissa = mantissa >> shift;
            const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
            const std::uint32_t halfway = 1u << (shift - 1);
            if (rest > halfway || (rest == halfway && (half_mantissa & 1u))) ++half_mantissa;
            return static_cast<std::uint16_t>(sign | half_mantissa);
        }
        std::uint32_t result = (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
        const std::uint32_t rest = mantissa & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;  // may carry to inf
        return static_cast<std::uint16_t>(sign | result);
    }

    static float to_float(std::uint16_t h) {
        const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
        std::uint32_t exponent = (h >> 10) & 0x1fu;
        std::uint32_t mantissa = h & 0x3ffu;
        std::uint32_t f;
        if (exponent == 0x1fu) {
            f = sign | 0x7f800000u | (mantissa << 13);
        } else if (exponent == 0) {
            if (mantissa == 0) {
                f = sign;
            } else {  // normalise the subnormal
                int e = -1;
                do { ++e; mantissa <<= 1; } while ((mantissa & 0x400u) == 0);
                f = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
            }
        } else {
            f = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
        }
        float value;
        std::memcpy(&value, &f, 4);
        return value;
    }
};

static_assert(sizeof(half) == 2, "half arrays must be laid out like numpy's float16");

#endif  // TILECRAFT_HLS_HALF_H
