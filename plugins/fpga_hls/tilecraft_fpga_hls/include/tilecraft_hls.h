// tilecraft_hls.h: helpers of tilecraft's generated HLS C++ — te's integer semantics (Python's
// floor division and modulo, 0 for a zero divisor), NaN-propagating float max / min (numpy's
// maximum / minimum), saturating float -> int. Synthesisable as written; C-simulation adds
// checks of the streams of each dataflow region (TC_CHECK_DRAINED).
#ifndef TILECRAFT_HLS_H
#define TILECRAFT_HLS_H

#include <cmath>

#include <ap_int.h>
#include <hls_half.h>
#include <hls_stream.h>

#define TC_INFINITY __builtin_huge_valf()
#define TC_NAN __builtin_nanf("")

#ifdef __SYNTHESIS__
#define TC_CHECK_DRAINED(s)
#else
#define TC_CHECK_DRAINED(s) ::tc_hls::check_drained(s)
#endif

static inline int tc_floordiv(int a, int b) {
    if (b == 0) return 0;
    int q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int tc_floormod(int a, int b) {
    if (b == 0) return 0;
    int r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline float tc_max(float a, float b) { return (a != a || a > b) ? a : b; }
static inline float tc_min(float a, float b) { return (a != a || a < b) ? a : b; }
static inline int tc_max(int a, int b) { return a > b ? a : b; }
static inline int tc_min(int a, int b) { return a < b ? a : b; }
static inline int tc_abs(int a) { return a < 0 ? -a : a; }
static inline int tc_float_to_int(float x, int low, int high) {
    float t = truncf(x);
    if (t != t) return 0;
    if (t <= (float)low) return low;
    if (t >= (float)high) return high;
    return (int)t;
}

#endif  // TILECRAFT_HLS_H
