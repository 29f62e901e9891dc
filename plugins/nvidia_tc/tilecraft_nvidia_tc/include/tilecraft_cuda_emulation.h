/* tilecraft_cuda_emulation.h: CUDA C on the CPU, for correctness (included by tilecraft_cuda.h
 * under -DTILECRAFT_CUDA_EMULATION; compile as C++17).
 *
 * - Blocks run one after another (in a seeded random order) in the launching OS thread; the
 *   threads of a block are cooperative fibers (ucontext, 64 KiB stacks with a guard page,
 *   allocated once and reused). A fiber runs until a switch point: __syncthreads, a warp
 *   collective, a cp.async wait or its end. The scheduler then picks the next runnable thread in
 *   a seeded random order (seed 0: ascending thread order), so that two seeds interleave the
 *   threads differently and a data race or a missing barrier changes the result.
 * - __syncthreads is a real barrier: every thread of the block reaches it before any goes on.
 *   Threads that wait at barriers of different lines, or at a barrier while others have exited,
 *   or a warp collective that can never complete, are reported as errors (never a hang).
 * - Warp collectives (__shfl*_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp, WMMA
 *   load / store / mma, mma.sync m16n8k16 by its per-lane registers) are rendezvous of the
 *   lanes of the mask, executed at once by the last lane to arrive; lanes that disagree
 *   (another collective, another mask, pointer or ldm) are errors.
 * - __shared__ variables are thread_local statics (one block at a time per OS thread, so each
 *   block has them to itself); extern __shared__ unsigned char tc_dynamic_smem[] is the block's
 *   dynamic buffer (filled with 0xff bytes — a NaN — before each block).
 * - cp.async copies are deferred to the wait that covers them, so a read before the wait sees
 *   stale data.
 * - __half and __nv_bfloat16 convert with round-to-nearest-even; their arithmetic goes through
 *   float as CUDA's host implementation does.
 *
 * The launch (see tc_emu::launch) returns 0, or -1 with the message in tc_emu::error_message().
 */
#ifndef TILECRAFT_CUDA_EMULATION_H
#define TILECRAFT_CUDA_EMULATION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

/* ---------------------------------------------------------------- qualifiers and built-in types */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __constant__
#define __shared__ thread_local
#define warpSize 32

#ifndef TC_EMU_STACK_BYTES
#define TC_EMU_STACK_BYTES (64 * 1024)
#endif
#ifndef TC_EMU_MAX_DYNAMIC_SHARED_BYTES
#define TC_EMU_MAX_DYNAMIC_SHARED_BYTES (228 * 1024)
#endif

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

/* ---------------------------------------------------------------- 16-bit floats */
namespace tc_emu {
inline unsigned short float_to_half_bits(float value) {  // round to nearest even
  uint32_t x;
  memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // inf, nan (quieted, payload kept)
    return static_cast<unsigned short>(
        sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u));
  if (magnitude >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // >= 65520
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    if (magnitude < 0x33000000u) return static_cast<unsigned short>(sign);  // below 2^-25
    uint32_t exponent = magnitude >> 23, mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent, half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<unsigned short>(sign | half);
  }
  uint32_t half = (magnitude - 0x38000000u) >> 13, rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<unsigned short>(sign | half);
}
inline float half_bits_to_float(unsigned short bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu, x;
  if (exponent == 0x1fu) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return sign ? -value : value;
  } else {
    x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float value;
  memcpy(&value, &x, 4);
  return value;
}
inline unsigned short float_to_bfloat16_bits(float value) {  // round to nearest even
  uint32_t x;
  memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<unsigned short>(x >> 16);
}
inline float bfloat16_bits_to_float(unsigned short bits) {
  uint32_t x = static_cast<uint32_t>(bits) << 16;
  float value;
  memcpy(&value, &x, 4);
  return value;
}
}  // namespace tc_emu

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float value) : __x(tc_emu::float_to_half_bits(value)) {}
  __half(double value) : __x(tc_emu::float_to_half_bits(static_cast<float>(value))) {}
  __half(int value) : __x(tc_emu::float_to_half_bits(static_cast<float>(value))) {}
  operator float() const { return tc_emu::half_bits_to_float(__x); }
};
typedef __half half;
struct __half2 { __half x, y; };

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) : __x(tc_emu::float_to_bfloat16_bits(value)) {}
  __nv_bfloat16(double value) : __x(tc_emu::float_to_bfloat16_bits(static_cast<float>(value))) {}
  __nv_bfloat16(int value) : __x(tc_emu::float_to_bfloat16_bits(static_cast<float>(value))) {}
  operator float() const { return tc_emu::bfloat16_bits_to_float(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;

inline __half __float2half(float value) { return __half(value); }
inline __half __float2half_rn(float value) { return __half(value); }
inline float __half2float(__half value) { return static_cast<float>(value); }
inline __half __ushort_as_half(unsigned short bits) { __half h; h.__x = bits; return h; }
inline unsigned short __half_as_ushort(__half value) { return value.__x; }
inline __nv_bfloat16 __float2bfloat16(float value) { return __nv_bfloat16(value); }
inline __nv_bfloat16 __float2bfloat16_rn(float value) { return __nv_bfloat16(value); }
inline float __bfloat162float(__nv_bfloat16 value) { return static_cast<float>(value); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline float2 __half22float2(__half2 value) { return {float(value.x), float(value.y)}; }
inline float __low2float(__half2 value) { return float(value.x); }
inline float __high2float(__half2 value) { return float(value.y); }

#define TC_EMU_16BIT_ARITHMETIC(T, P)                                                           \
  inline T operator+(const T& a, const T& b) { return T(float(a) + float(b)); }                 \
  inline T operator-(const T& a, const T& b) { return T(float(a) - float(b)); }                 \
  inline T operator*(const T& a, const T& b) { return T(float(a) * float(b)); }                 \
  inline T operator/(const T& a, const T& b) { return T(float(a) / float(b)); }                 \
  inline T operator-(const T& a) { T r = a; r.__x ^= 0x8000u; return r; }                        \
  inline T& operator+=(T& a, const T& b) { return a = a + b; }                                   \
  inline T& operator-=(T& a, const T& b) { return a = a - b; }                                   \
  inline T& operator*=(T& a, const T& b) { return a = a * b; }                                   \
  inline T& operator/=(T& a, const T& b) { return a = a / b; }                                   \
  inline bool operator==(const T& a, const T& b) { return float(a) == float(b); }               \
  inline bool operator!=(const T& a, const T& b) { return float(a) != float(b); }               \
  inline bool operator<(const T& a, const T& b) { return float(a) < float(b); }                 \
  inline bool operator<=(const T& a, const T& b) { return float(a) <= float(b); }               \
  inline bool operator>(const T& a, const T& b) { return float(a) > float(b); }                 \
  inline bool operator>=(const T& a, const T& b) { return float(a) >= float(b); }               \
  inline T P##add(T a, T b) { return a + b; }                                                    \
  inline T P##sub(T a, T b) { return a - b; }                                                    \
  inline T P##mul(T a, T b) { return a * b; }                                                    \
  inline T P##div(T a, T b) { return a / b; }                                                    \
  inline T P##neg(T a) { return -a; }                                                            \
  inline T P##fma(T a, T b, T c) { return T(fmaf(float(a), float(b), float(c))); }              \
  inline T P##max(T a, T b) { return T(fmaxf(float(a), float(b))); }                            \
  inline T P##min(T a, T b) { return T(fminf(float(a), float(b))); }                            \
  inline T P##abs(T a) { T r = a; r.__x &= 0x7fffu; return r; }                                  \
  inline bool P##gt(T a, T b) { return a > b; }                                                  \
  inline bool P##lt(T a, T b) { return a < b; }                                                  \
  inline bool P##eq(T a, T b) { return a == b; }
TC_EMU_16BIT_ARITHMETIC(__half, __h)
TC_EMU_16BIT_ARITHMETIC(__nv_bfloat16, __h)
#undef TC_EMU_16BIT_ARITHMETIC
inline __half2 __hadd2(__half2 a, __half2 b) { return {a.x + b.x, a.y + b.y}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {a.x * b.x, a.y * b.y}; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __half hexp(__half a) { return __half(expf(float(a))); }
inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }

/* ---------------------------------------------------------------- math and integer intrinsics */
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
template <class T> inline T __ldg(const T* pointer) { return *pointer; }
inline void __threadfence() {}
inline void __threadfence_block() {}

/* atomics: trivially atomic, the threads of a launch are cooperative fibers of one OS thread */
#define TC_EMU_ATOMICS(T)                                                                        \
  inline T atomicAdd(T* address, T value) { T old = *address; *address = old + value; return old; } \
  inline T atomicSub(T* address, T value) { T old = *address; *address = old - value; return old; } \
  inline T atomicExch(T* address, T value) { T old = *address; *address = value; return old; }      \
  inline T atomicMax(T* address, T value) { T old = *address; if (value > old) *address = value; return old; } \
  inline T atomicMin(T* address, T value) { T old = *address; if (value < old) *address = value; return old; } \
  inline T atomicCAS(T* address, T compare, T value) {                                            \
    T old = *address;                                                                              \
    if (old == compare) *address = value;                                                          \
    return old;                                                                                    \
  }
TC_EMU_ATOMICS(int)
TC_EMU_ATOMICS(unsigned)
TC_EMU_ATOMICS(unsigned long long)
TC_EMU_ATOMICS(float)
TC_EMU_ATOMICS(double)
#undef TC_EMU_ATOMICS

/* ---------------------------------------------------------------- the scheduler */
namespace tc_emu {

enum class State { Ready, AtBarrier, AtCollective, Done };

struct Fiber;
struct Collective;
typedef bool (*CompleteCollective)(Collective* const* lanes, unsigned mask, std::string& error);

/* one lane's part of a warp collective; lives on the lane's stack while it waits */
struct Collective {
  const char* name;            // for messages, e.g. "__shfl_sync"
  CompleteCollective complete; // run once, by the last lane to arrive
  unsigned mask;
  uint64_t value, result;      // shuffles and votes
  int argument, width;         // shuffles: source lane / delta / lane mask, and the width
  void* fragments[4];          // WMMA: d, a, b, c (or the fragment of a load / store)
  const void* pointer;         // WMMA load / store: the matrix
  unsigned ldm;
  int layout;
};

struct AsyncCopy { void* destination; const void* source; unsigned bytes; };

struct Fiber {
  ucontext_t context;
  uint3 thread_idx;
  unsigned id = 0, warp = 0, lane = 0;
  State state = State::Ready;
  int barrier_line = 0;
  Collective* collective = nullptr;
  std::vector<AsyncCopy> uncommitted;
  std::deque<std::vector<AsyncCopy>> committed;
  char* stack = nullptr;
};

struct Launch {
  dim3 grid, block;
  uint3 block_idx;
  size_t dynamic_shared = 0;
  uint64_t rng = 0;
  bool random_order = false;
  void (*body)(void*) = nullptr;
  void* body_argument = nullptr;
  unsigned threads = 0, done = 0, at_barrier = 0;
  std::vector<Fiber> fibers;
  std::deque<unsigned> ready;
  ucontext_t scheduler;
  bool failed = false;
  std::string error;
};

/* one launch at a time per library (a lock in launch()): plain globals, read fast */
static Launch* current_launch = nullptr;
static Fiber* current_fiber = nullptr;
static std::string last_error;
static std::mutex launch_lock;

inline const char* error_message() { return last_error.c_str(); }

inline uint64_t next_random(uint64_t& state) {  // splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline std::string block_name(const Launch& launch) {
  char text[96];
  snprintf(text, sizeof text, "block (%u, %u, %u)", launch.block_idx.x, launch.block_idx.y,
           launch.block_idx.z);
  return text;
}

inline std::string thread_name(const Fiber& fiber) {
  char text[96];
  snprintf(text, sizeof text, "thread (%u, %u, %u) (warp %u, lane %u)", fiber.thread_idx.x,
           fiber.thread_idx.y, fiber.thread_idx.z, fiber.warp, fiber.lane);
  return text;
}

/* back to the scheduler; returns when this fiber is picked again */
inline void switch_to_scheduler() {
  Fiber* self = current_fiber;
  __asm__ __volatile__("" ::: "memory");
  swapcontext(&self->context, &current_launch->scheduler);
  __asm__ __volatile__("" ::: "memory");
}

/* a fault found inside a thread: the block is abandoned and the launch reports it */
[[noreturn]] inline void fail(const std::string& message) {
  Launch& launch = *current_launch;
  launch.failed = true;
  launch.error = block_name(launch) + ", " + thread_name(*current_fiber) + ": " + message;
  current_fiber->state = State::Done;
  swapcontext(&current_fiber->context, &launch.scheduler);
  abort();  // never resumed
}

inline void yield() {
  current_launch->ready.push_back(current_fiber->id);
  switch_to_scheduler();
}

inline void perform(std::vector<AsyncCopy>& copies) {
  for (const AsyncCopy& copy : copies) memcpy(copy.destination, copy.source, copy.bytes);
  copies.clear();
}

inline void barrier(int line) {
  Fiber& self = *current_fiber;
  self.state = State::AtBarrier;
  self.barrier_line = line;
  ++current_launch->at_barrier;
  switch_to_scheduler();
}

/* arrive at a warp collective; returns once the last lane of the mask has run it */
inline void arrive(Collective& mine) {
  Launch& launch = *current_launch;
  Fiber& self = *current_fiber;
  if (!(mine.mask >> self.lane & 1u)) {
    char text[160];
    snprintf(text, sizeof text, "%s with mask 0x%08x, which does not include the calling lane %u",
             mine.name, mine.mask, self.lane);
    fail(text);
  }
  self.state = State::AtCollective;
  self.collective = &mine;
  Collective* lanes[32] = {};
  bool complete = true;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mine.mask >> lane & 1u)) continue;
    unsigned id = self.warp * 32 + lane;
    char text[320];
    if (id >= launch.threads) {
      snprintf(text, sizeof text, "%s with mask 0x%08x names lane %u of warp %u, which does not "
               "exist (%u threads in the block): give the mask of the lanes that exist",
               mine.name, mine.mask, lane, self.warp, launch.threads);
      fail(text);
    }
    Fiber& other = launch.fibers[id];
    if (other.state == State::Done) {
      snprintf(text, sizeof text, "%s with mask 0x%08x waits for lane %u, which has exited",
               mine.name, mine.mask, lane);
      fail(text);
    }
    if (other.state == State::AtCollective) {
      const Collective& theirs = *other.collective;
      if (theirs.complete != mine.complete || theirs.mask != mine.mask) {
        snprintf(text, sizeof text, "divergent warp collective: this lane is at %s (mask 0x%08x) "
                 "while lane %u of its mask is at %s (mask 0x%08x)", mine.name, mine.mask, lane,
                 theirs.name, theirs.mask);
        fail(text);
      }
      lanes[lane] = other.collective;
    } else {
      complete = false;
    }
  }
  if (complete) {
    std::string error;
    if (!mine.complete(lanes, mine.mask, error)) fail(mine.name + std::string(": ") + error);
    for (unsigned lane = 0; lane < 32; ++lane) {
      if (!(mine.mask >> lane & 1u)) continue;
      Fiber& other = launch.fibers[self.warp * 32 + lane];
      other.state = State::Ready;
      other.collective = nullptr;
      if (&other != &self) launch.ready.push_back(other.id);
    }
    launch.ready.push_back(self.id);
  }
  switch_to_scheduler();
}

inline void fiber_main() {
  Launch& launch = *current_launch;
  launch.body(launch.body_argument);
  Fiber& self = *current_fiber;
  perform(self.uncommitted);  // copies never waited for still land
  for (auto& group : self.committed) perform(group);
  self.committed.clear();
  self.state = State::Done;
  ++launch.done;
  swapcontext(&self.context, &launch.scheduler);
  abort();  // never resumed
}

inline char* stack_of(unsigned index) {
  static std::vector<char*> stacks;  // allocated once, reused by every block and launch
  static long page = sysconf(_SC_PAGESIZE);
  while (stacks.size() <= index) {
    size_t bytes = TC_EMU_STACK_BYTES + static_cast<size_t>(page);
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return nullptr;
    mprotect(memory, static_cast<size_t>(page), PROT_NONE);  // overflowing the stack faults
    stacks.push_back(static_cast<char*>(memory) + page);
  }
  return stacks[index];
}

inline std::string describe_stall(const Launch& launch) {
  unsigned at_collective = 0, lines[2] = {0, 0};
  int distinct = 0;
  const char* collective = "";
  for (const Fiber& fiber : launch.fibers) {
    if (fiber.state == State::AtCollective) {
      ++at_collective;
      collective = fiber.collective->name;
    }
    if (fiber.state == State::AtBarrier) {
      if (distinct == 0 || (distinct == 1 && lines[0] != static_cast<unsigned>(fiber.barrier_line)))
        lines[distinct++] = static_cast<unsigned>(fiber.barrier_line);
    }
  }
  char text[512];
  if (at_collective) {
    snprintf(text, sizeof text, "%u threads wait at %s for lanes that will never join it (%u at "
             "__syncthreads, %u exited): a warp collective needs every lane of its mask",
             at_collective, collective, launch.at_barrier, launch.done);
  } else if (distinct == 2) {
    snprintf(text, sizeof text, "divergent barrier: threads wait at __syncthreads() of line %u "
             "and of line %u: every thread of the block must reach the same barriers",
             lines[0], lines[1]);
  } else {
    snprintf(text, sizeof text, "divergent barrier: %u of %u threads wait at __syncthreads() "
             "(line %u) while %u have exited: every thread of the block must reach each "
             "__syncthreads (guard the work, not the barrier)", launch.at_barrier,
             launch.threads, lines[0], launch.done);
  }
  return text;
}

/* run one block to its end; false (and launch.error) on a fault */
inline bool run_block(Launch& launch) {
  launch.done = launch.at_barrier = 0;
  launch.ready.clear();
  for (unsigned id = 0; id < launch.threads; ++id) {
    Fiber& fiber = launch.fibers[id];
    fiber.id = id;
    fiber.thread_idx = {id % launch.block.x, id / launch.block.x % launch.block.y,
                        id / (launch.block.x * launch.block.y)};
    fiber.warp = id / 32;
    fiber.lane = id % 32;
    fiber.state = State::Ready;
    fiber.collective = nullptr;
    fiber.uncommitted.clear();
    fiber.committed.clear();
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack;
    fiber.context.uc_stack.ss_size = TC_EMU_STACK_BYTES;
    fiber.context.uc_link = nullptr;
    makecontext(&fiber.context, fiber_main, 0);
    launch.ready.push_back(id);
  }
  while (launch.done < launch.threads) {
    if (launch.ready.empty()) {
      if (launch.at_barrier + launch.done == launch.threads && launch.done == 0) {
        int line = launch.fibers[0].barrier_line;
        bool same = true;
        for (const Fiber& fiber : launch.fibers) same = same && fiber.barrier_line == line;
        if (same) {
          launch.at_barrier = 0;
          for (Fiber& fiber : launch.fibers) {
            fiber.state = State::Ready;
            launch.ready.push_back(fiber.id);
          }
          continue;
        }
      }
      launch.error = block_name(launch) + ": " + describe_stall(launch);
      return false;
    }
    size_t pick = 0;
    if (launch.random_order) {
      pick = static_cast<size_t>(next_random(launch.rng) % launch.ready.size());
      std::swap(launch.ready[pick], launch.ready.front());
    }
    unsigned id = launch.ready.front();
    launch.ready.pop_front();
    current_fiber = &launch.fibers[id];
    swapcontext(&launch.scheduler, &current_fiber->context);
    if (launch.failed) return false;
  }
  return true;
}

}  // namespace tc_emu

/* ---------------------------------------------------------------- CUDA names of the emulation */
#define threadIdx (static_cast<const uint3&>(::tc_emu::current_fiber->thread_idx))
#define blockIdx (static_cast<const uint3&>(::tc_emu::current_launch->block_idx))
#define blockDim (static_cast<const dim3&>(::tc_emu::current_launch->block))
#define gridDim (static_cast<const dim3&>(::tc_emu::current_launch->grid))

/* the block's dynamic shared memory (internal linkage: the kernel's block-scope
   `extern __shared__ unsigned char tc_dynamic_smem[];` names this one) */
alignas(256) static thread_local unsigned char tc_dynamic_smem[TC_EMU_MAX_DYNAMIC_SHARED_BYTES];

inline void __syncthreads(int line = __builtin_LINE()) { ::tc_emu::barrier(line); }

namespace tc_emu {
template <class T> inline uint64_t to_bits(T value) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <class T> inline T from_bits(uint64_t bits) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  return value;
}

enum class Shuffle { Index, Up, Down, Xor };

template <Shuffle kind>
inline bool complete_shuffle(Collective* const* lanes, unsigned mask, std::string& error) {
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    Collective& mine = *lanes[lane];
    unsigned width = static_cast<unsigned>(mine.width);
    if (width == 0 || width > 32 || (width & (width - 1))) {
      error = "width " + std::to_string(mine.width) + " is not a power of two up to 32";
      return false;
    }
    unsigned first = lane & ~(width - 1), source = lane;
    int argument = mine.argument;
    if (kind == Shuffle::Index) {
      source = first + (static_cast<unsigned>(argument) & (width - 1));
    } else if (kind == Shuffle::Up) {
      if (lane - first >= static_cast<unsigned>(argument)) source = lane - argument;
    } else if (kind == Shuffle::Down) {
      if (lane - first + static_cast<unsigned>(argument) < width) source = lane + argument;
    } else {
      unsigned other = lane ^ static_cast<unsigned>(argument);
      if (other < 32 && other <= (first | (width - 1))) source = other;
    }
    if (!(mask >> source & 1u)) {
      error = "lane " + std::to_string(lane) + " reads lane " + std::to_string(source) +
              ", which is not in the mask";
      return false;
    }
    mine.result = lanes[source]->value;
  }
  return true;
}

enum class Vote { Ballot, Any, All, Sync };

template <Vote kind>
inline bool complete_vote(Collective* const* lanes, unsigned mask, std::string&) {
  unsigned ballot = 0;
  for (unsigned lane = 0; lane < 32; ++lane)
    if ((mask >> lane & 1u) && lanes[lane]->value) ballot |= 1u << lane;
  uint64_t result = kind == Vote::Ballot ? ballot
                  : kind == Vote::Any  ? (ballot != 0)
                  : kind == Vote::All  ? (ballot == mask) : 0;
  for (unsigned lane = 0; lane < 32; ++lane)
    if (mask >> lane & 1u) lanes[lane]->result = result;
  return true;
}

template <Shuffle kind, class T>
inline T shuffle(const char* name, unsigned mask, T value, int argument, int width) {
  Collective mine{};
  mine.name = name;
  mine.complete = complete_shuffle<kind>;
  mine.mask = mask;
  mine.value = to_bits(value);
  mine.argument = argument;
  mine.width = width;
  arrive(mine);
  return from_bits<T>(mine.result);
}

template <Vote kind>
inline unsigned vote(const char* name, unsigned mask, int predicate) {
  Collective mine{};
  mine.name = name;
  mine.complete = complete_vote<kind>;
  mine.mask = mask;
  mine.value = predicate != 0;
  arrive(mine);
  return static_cast<unsigned>(mine.result);
}
}  // namespace tc_emu

template <class T> inline T __shfl_sync(unsigned mask, T value, int source, int width = 32) {
  return tc_emu::shuffle<tc_emu::Shuffle::Index>("__shfl_sync", mask, value, source, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return tc_emu::shuffle<tc_emu::Shuffle::Up>("__shfl_up_sync", mask, value,
                                              static_cast<int>(delta), width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return tc_emu::shuffle<tc_emu::Shuffle::Down>("__shfl_down_sync", mask, value,
                                                static_cast<int>(delta), width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return tc_emu::shuffle<tc_emu::Shuffle::Xor>("__shfl_xor_sync", mask, value, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return tc_emu::vote<tc_emu::Vote::Ballot>("__ballot_sync", mask, predicate);
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(tc_emu::vote<tc_emu::Vote::Any>("__any_sync", mask, predicate));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(tc_emu::vote<tc_emu::Vote::All>("__all_sync", mask, predicate));
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  tc_emu::vote<tc_emu::Vote::Sync>("__syncwarp", mask, 0);
}
inline unsigned __activemask() {  // the lanes of this warp that exist and have not exited
  unsigned mask = 0;
  tc_emu::Launch& launch = *tc_emu::current_launch;
  for (unsigned lane = 0; lane < 32; ++lane) {
    unsigned id = tc_emu::current_fiber->warp * 32 + lane;
    if (id < launch.threads && launch.fibers[id].state != tc_emu::State::Done) mask |= 1u << lane;
  }
  return mask;
}

/* ---------------------------------------------------------------- cp.async */
inline void tc_emu_cp_async(void* smem, const void* gmem, unsigned bytes) {
  if (reinterpret_cast<uintptr_t>(smem) % bytes || reinterpret_cast<uintptr_t>(gmem) % bytes) {
    char text[160];
    snprintf(text, sizeof text, "tc_cp_async_%u: addresses %p and %p are not %u-byte aligned",
             bytes, smem, gmem, bytes);
    tc_emu::fail(text);
  }
  tc_emu::current_fiber->uncommitted.push_back({smem, gmem, bytes});
}
inline void tc_cp_async_16(void* smem, const void* gmem) { tc_emu_cp_async(smem, gmem, 16); }
inline void tc_cp_async_4(void* smem, const void* gmem) { tc_emu_cp_async(smem, gmem, 4); }
inline void tc_cp_async_commit() {
  tc_emu::Fiber& self = *tc_emu::current_fiber;
  self.committed.push_back(std::move(self.uncommitted));
  self.uncommitted.clear();
}
template <int N> inline void tc_cp_async_wait() {
  static_assert(N >= 0, "tc_cp_async_wait<N> needs N >= 0");
  tc_emu::Fiber& self = *tc_emu::current_fiber;
  while (self.committed.size() > static_cast<size_t>(N)) {  // the oldest groups land now
    tc_emu::perform(self.committed.front());
    self.committed.pop_front();
  }
  tc_emu::yield();
}

/* ---------------------------------------------------------------- WMMA */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct fragment_shape;
template <int M, int N, int K> struct fragment_shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct fragment_shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct fragment_shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

/* element e of the rows x cols matrix (row-major numbering) is x[e % num_elements] of lane
   e / num_elements; element-wise operations on x[] therefore act on the whole matrix */
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                (M == 8 && N == 32 && K == 16), "WMMA shapes: m16n16k16, m32n8k16, m8n32k16");
  using element_type = T;
  using use = Use;
  using layout = Layout;
  static constexpr int rows = fragment_shape<Use, M, N, K>::rows;
  static constexpr int cols = fragment_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  T x[num_elements];
};

template <class Fragment, class V> inline void fill_fragment(Fragment& fragment, const V& value) {
  for (int i = 0; i < Fragment::num_elements; ++i)
    fragment.x[i] = static_cast<typename Fragment::element_type>(value);
}

namespace detail {
using tc_emu::Collective;
template <class Fragment> constexpr bool column_major() {
  return std::is_same<typename Fragment::layout, col_major>::value;
}
/* every lane must pass the same matrix, ldm and layout */
inline bool agree(Collective* const* lanes, unsigned mask, std::string& error) {
  const Collective* first = nullptr;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    if (!first) { first = lanes[lane]; continue; }
    const Collective& other = *lanes[lane];
    if (other.pointer != first->pointer || other.ldm != first->ldm || other.layout != first->layout) {
      error = "the lanes of the warp pass different pointers, ldm or layouts (lane " +
              std::to_string(lane) + "): every lane must pass the same ones";
      return false;
    }
  }
  return true;
}

template <class Fragment, class Memory>
bool complete_load(Collective* const* lanes, unsigned mask, std::string& error) {
  if (!agree(lanes, mask, error)) return false;
  const Memory* matrix = static_cast<const Memory*>(lanes[0]->pointer);
  unsigned ldm = lanes[0]->ldm;
  bool column = lanes[0]->layout == mem_col_major;
  for (unsigned lane = 0; lane < 32; ++lane) {
    Fragment& fragment = *static_cast<Fragment*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < Fragment::num_elements; ++i) {
      int element = static_cast<int>(lane) * Fragment::num_elements + i;
      int row = element / Fragment::cols, col = element % Fragment::cols;
      fragment.x[i] = static_cast<typename Fragment::element_type>(
          column ? matrix[col * ldm + row] : matrix[row * ldm + col]);
    }
  }
  return true;
}

template <class Fragment, class Memory>
bool complete_store(Collective* const* lanes, unsigned mask, std::string& error) {
  if (!agree(lanes, mask, error)) return false;
  Memory* matrix = static_cast<Memory*>(const_cast<void*>(lanes[0]->pointer));
  unsigned ldm = lanes[0]->ldm;
  bool column = lanes[0]->layout == mem_col_major;
  for (unsigned lane = 0; lane < 32; ++lane) {
    const Fragment& fragment = *static_cast<const Fragment*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < Fragment::num_elements; ++i) {
      int element = static_cast<int>(lane) * Fragment::num_elements + i;
      int row = element / Fragment::cols, col = element % Fragment::cols;
      (column ? matrix[col * ldm + row] : matrix[row * ldm + col]) = static_cast<Memory>(fragment.x[i]);
    }
  }
  return true;
}

template <class Fragment> typename Fragment::element_type element(Collective* const* lanes, int slot,
                                                                  int row, int col) {
  int index = row * Fragment::cols + col;
  const Fragment& fragment = *static_cast<const Fragment*>(lanes[index / Fragment::num_elements]->fragments[slot]);
  return fragment.x[index % Fragment::num_elements];
}

template <class D, class A, class B, class C>
bool complete_mma(Collective* const* lanes, unsigned, std::string&) {
  using Math = typename std::conditional<std::is_integral<typename C::element_type>::value,
                                         long long, float>::type;
  constexpr int M = A::rows, N = B::cols, K = A::cols;
  Math result[M][N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      Math sum = static_cast<Math>(element<C>(lanes, 3, i, j));
      for (int k = 0; k < K; ++k)
        sum += static_cast<Math>(element<A>(lanes, 1, i, k)) * static_cast<Math>(element<B>(lanes, 2, k, j));
      result[i][j] = sum;
    }
  for (unsigned lane = 0; lane < 32; ++lane) {  // d may be c: written after every read
    D& d = *static_cast<D*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < D::num_elements; ++i) {
      int index = static_cast<int>(lane) * D::num_elements + i;
      d.x[i] = static_cast<typename D::element_type>(result[index / N][index % N]);
    }
  }
  return true;
}

inline void check_matrix(const char* name, const void* pointer, unsigned ldm, size_t element_bytes) {
  char text[256];
  if (reinterpret_cast<uintptr_t>(pointer) % 32) {
    snprintf(text, sizeof text, "%s: the matrix pointer %p is not 256-bit (32-byte) aligned, as "
             "WMMA requires", name, pointer);
    tc_emu::fail(text);
  }
  if ((ldm * element_bytes) % 16) {
    snprintf(text, sizeof text, "%s: ldm %u is not a multiple of %zu elements (16 bytes), as "
             "WMMA requires", name, ldm, 16 / element_bytes);
    tc_emu::fail(text);
  }
}
}  // namespace detail

template <class Fragment, class Memory>
inline void load_matrix_sync(Fragment& fragment, const Memory* pointer, unsigned ldm) {
  static_assert(!std::is_same<typename Fragment::use, accumulator>::value,
                "load_matrix_sync of an accumulator takes a layout_t");
  detail::check_matrix("load_matrix_sync", pointer, ldm, sizeof(Memory));
  tc_emu::Collective mine{};
  mine.name = "load_matrix_sync";
  mine.complete = detail::complete_load<Fragment, Memory>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = &fragment;
  mine.pointer = pointer;
  mine.ldm = ldm;
  mine.layout = detail::column_major<Fragment>() ? mem_col_major : mem_row_major;
  tc_emu::arrive(mine);
}

template <class Fragment, class Memory>
inline void load_matrix_sync(Fragment& fragment, const Memory* pointer, unsigned ldm, layout_t layout) {
  detail::check_matrix("load_matrix_sync", pointer, ldm, sizeof(Memory));
  tc_emu::Collective mine{};
  mine.name = "load_matrix_sync";
  mine.complete = detail::complete_load<Fragment, Memory>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = &fragment;
  mine.pointer = pointer;
  mine.ldm = ldm;
  mine.layout = layout;
  tc_emu::arrive(mine);
}

template <class Fragment, class Memory>
inline void store_matrix_sync(Memory* pointer, const Fragment& fragment, unsigned ldm, layout_t layout) {
  detail::check_matrix("store_matrix_sync", pointer, ldm, sizeof(Memory));
  tc_emu::Collective mine{};
  mine.name = "store_matrix_sync";
  mine.complete = detail::complete_store<Fragment, Memory>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = const_cast<Fragment*>(&fragment);
  mine.pointer = pointer;
  mine.ldm = ldm;
  mine.layout = layout;
  tc_emu::arrive(mine);
}

template <class D, class A, class B, class C>
inline void mma_sync(D& d, const A& a, const B& b, const C& c) {
  tc_emu::Collective mine{};
  mine.name = "mma_sync";
  mine.complete = detail::complete_mma<D, A, B, C>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = &d;
  mine.fragments[1] = const_cast<A*>(&a);
  mine.fragments[2] = const_cast<B*>(&b);
  mine.fragments[3] = const_cast<C*>(&c);
  tc_emu::arrive(mine);
}
}  // namespace wmma
}  // namespace nvcuda

/* ---------------------------------------------------------------- mma.sync.aligned.m16n8k16
 * The PTX instruction's per-lane register semantics (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"), a warp collective: each lane passes its A, B and C/D registers; the last lane
 * to arrive gathers the 16 x 16 A, the 16 x 8 B and the 16 x 8 C from every lane's registers by
 * the fragment layouts (g = lane >> 2, q = lane & 3), computes D = A x B + C (float sums for
 * f16 / bf16, rounded once to f16 for an f16 accumulator; 64-bit integer sums wrapped to s32
 * for s8) and scatters D into each lane's registers. The generated source calls it where a GPU would run the asm. */
namespace tc_emu {
enum class MmaInput { F16, BF16, S8 };

/* element `index` (low to high) of a lane's A or B registers */
template <MmaInput In> inline float mma_element(const unsigned* registers, int index) {
  if (In == MmaInput::S8)
    return static_cast<float>(static_cast<signed char>((registers[index / 4] >> (8 * (index % 4))) & 0xffu));
  unsigned short bits = static_cast<unsigned short>((registers[index / 2] >> (16 * (index % 2))) & 0xffffu);
  return In == MmaInput::F16 ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
}

template <MmaInput In, class Acc>
bool complete_mma_m16n8k16(Collective* const* lanes, unsigned, std::string&) {
  using Math = typename std::conditional<std::is_integral<Acc>::value, long long, float>::type;
  float a[16][16], b[16][8];
  Math c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, q = lane & 3;
    const unsigned* ra = static_cast<const unsigned*>(lanes[lane]->fragments[1]);
    const unsigned* rb = static_cast<const unsigned*>(lanes[lane]->fragments[2]);
    const Acc* rd = static_cast<const Acc*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < 8; ++i) {
      int row = In == MmaInput::S8 ? g + 8 * (i >= 4) : g + 8 * ((i >> 1) & 1);
      int col = In == MmaInput::S8 ? 4 * q + (i & 3) : 2 * q + (i & 1) + 8 * (i >= 4);
      a[row][col] = mma_element<In>(ra, i);
    }
    for (int i = 0; i < 4; ++i) {
      int row = In == MmaInput::S8 ? 4 * q + i : 2 * q + (i & 1) + 8 * (i >= 2);
      b[row][g] = mma_element<In>(rb, i);
    }
    for (int i = 0; i < 4; ++i) c[g + 8 * (i >> 1)][2 * q + (i & 1)] = static_cast<Math>(rd[i]);
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 16; ++k) c[i][j] += static_cast<Math>(a[i][k]) * static_cast<Math>(b[k][j]);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, q = lane & 3;
    Acc* rd = static_cast<Acc*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < 4; ++i)
      rd[i] = In == MmaInput::S8
                  ? static_cast<Acc>(static_cast<int>(static_cast<uint32_t>(
                        static_cast<long long>(c[g + 8 * (i >> 1)][2 * q + (i & 1)]))))
                  : static_cast<Acc>(c[g + 8 * (i >> 1)][2 * q + (i & 1)]);
  }
  return true;
}

/* the f16 accumulator: C / D elements packed two per register (f16x2), same positions */
inline bool complete_mma_m16n8k16_f16(Collective* const* lanes, unsigned, std::string&) {
  float a[16][16], b[16][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, q = lane & 3;
    const unsigned* ra = static_cast<const unsigned*>(lanes[lane]->fragments[1]);
    const unsigned* rb = static_cast<const unsigned*>(lanes[lane]->fragments[2]);
    const unsigned* rd = static_cast<const unsigned*>(lanes[lane]->fragments[0]);
    for (int i = 0; i < 8; ++i)
      a[g + 8 * ((i >> 1) & 1)][2 * q + (i & 1) + 8 * (i >= 4)] = mma_element<MmaInput::F16>(ra, i);
    for (int i = 0; i < 4; ++i) b[2 * q + (i & 1) + 8 * (i >= 2)][g] = mma_element<MmaInput::F16>(rb, i);
    for (int i = 0; i < 4; ++i) c[g + 8 * (i >> 1)][2 * q + (i & 1)] = mma_element<MmaInput::F16>(rd, i);
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 16; ++k) c[i][j] += a[i][k] * b[k][j];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, q = lane & 3;
    unsigned* rd = static_cast<unsigned*>(lanes[lane]->fragments[0]);
    for (int r = 0; r < 2; ++r)
      rd[r] = static_cast<unsigned>(float_to_half_bits(c[g + 8 * r][2 * q])) |
              (static_cast<unsigned>(float_to_half_bits(c[g + 8 * r][2 * q + 1])) << 16);
  }
  return true;
}

template <MmaInput In>
inline void mma_m16n8k16(unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2]) {
  static_assert(In == MmaInput::F16, "mma.sync m16n8k16 with an f16 accumulator takes f16 inputs");
  Collective mine{};
  mine.name = "mma.sync.aligned.m16n8k16";
  mine.complete = complete_mma_m16n8k16_f16;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = d;
  mine.fragments[1] = const_cast<unsigned*>(a);
  mine.fragments[2] = const_cast<unsigned*>(b);
  arrive(mine);
}

/* ldmatrix.sync.aligned.m8n8.xX[.trans].shared.b16: lanes 8j .. 8j + 7 pass the rows of
 * matrix j; lane t receives in register j the pair (t / 4, 2 (t % 4) .. + 1) of matrix j, or
 * transposed the pair (2 (t % 4) .. + 1, t / 4) */
template <int X, bool Trans>
bool complete_ldmatrix(Collective* const* lanes, unsigned, std::string& error) {
  for (int lane = 0; lane < 8 * X; ++lane)
    if (reinterpret_cast<uintptr_t>(lanes[lane]->pointer) % 16) {
      error = "lane " + std::to_string(lane) + " passes a row address that is not 16-byte aligned";
      return false;
    }
  for (int t = 0; t < 32; ++t) {
    unsigned* registers = static_cast<unsigned*>(lanes[t]->fragments[0]);
    for (int j = 0; j < X; ++j) {
      unsigned short pair[2];
      for (int e = 0; e < 2; ++e) {
        const int row = Trans ? 2 * (t % 4) + e : t / 4, col = Trans ? t / 4 : 2 * (t % 4) + e;
        memcpy(&pair[e], static_cast<const unsigned char*>(lanes[8 * j + row]->pointer) + 2 * col, 2);
      }
      registers[j] = static_cast<unsigned>(pair[0]) | (static_cast<unsigned>(pair[1]) << 16);
    }
  }
  return true;
}

template <int X, bool Trans> inline void ldmatrix(unsigned (&r)[X], const void* row) {
  Collective mine{};
  mine.name = Trans ? "ldmatrix.sync.aligned.m8n8.trans" : "ldmatrix.sync.aligned.m8n8";
  mine.complete = complete_ldmatrix<X, Trans>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = r;
  mine.pointer = row;
  arrive(mine);
}

/* D = A x B + D for this lane's registers (the inline PTX's operands) */
template <MmaInput In, class Acc, int AR, int BR>
inline void mma_m16n8k16(Acc (&d)[4], const unsigned (&a)[AR], const unsigned (&b)[BR]) {
  static_assert(AR == (In == MmaInput::S8 ? 2 : 4) && BR == (In == MmaInput::S8 ? 1 : 2),
                "mma.sync m16n8k16 takes 4 + 2 registers of f16 / bf16, 2 + 1 of s8");
  Collective mine{};
  mine.name = "mma.sync.aligned.m16n8k16";
  mine.complete = complete_mma_m16n8k16<In, Acc>;
  mine.mask = 0xffffffffu;
  mine.fragments[0] = d;
  mine.fragments[1] = const_cast<unsigned*>(a);
  mine.fragments[2] = const_cast<unsigned*>(b);
  arrive(mine);
}
}  // namespace tc_emu

/* ---------------------------------------------------------------- the launch */
namespace tc_emu {
/* A kernel argument: converts to whatever pointer type the kernel's parameter has. */
struct Argument {
  void* pointer;
  template <class T> operator T*() const { return static_cast<T*>(pointer); }
};

/* Run the grid: `body(argument)` calls the kernel. 0, or -1 with error_message(). */
inline int launch(dim3 grid, dim3 block, size_t dynamic_shared, unsigned long long seed,
                  void (*body)(void*), void* argument) {
  std::lock_guard<std::mutex> guard(launch_lock);
  last_error.clear();
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  char text[256];
  if (threads == 0 || threads > 1024 || blocks == 0) {
    snprintf(text, sizeof text, "launch of %llu blocks of %llu threads: a block has 1 to 1024 "
             "threads and a grid at least one block", blocks, threads);
    last_error = text;
    return -1;
  }
  if (dynamic_shared > TC_EMU_MAX_DYNAMIC_SHARED_BYTES) {
    snprintf(text, sizeof text, "%zu bytes of dynamic shared memory asked, the emulation has %d",
             dynamic_shared, TC_EMU_MAX_DYNAMIC_SHARED_BYTES);
    last_error = text;
    return -1;
  }
  Launch state;
  state.grid = grid;
  state.block = block;
  state.dynamic_shared = dynamic_shared;
  state.rng = seed;
  state.random_order = seed != 0;
  state.body = body;
  state.body_argument = argument;
  state.threads = static_cast<unsigned>(threads);
  state.fibers.resize(state.threads);
  for (unsigned id = 0; id < state.threads; ++id) {
    state.fibers[id].stack = stack_of(id);
    if (!state.fibers[id].stack) {
      last_error = "cannot allocate the emulated threads' stacks";
      return -1;
    }
  }
  std::vector<unsigned long long> order(blocks);
  for (unsigned long long index = 0; index < blocks; ++index) order[index] = index;
  if (state.random_order)
    for (unsigned long long index = blocks; index > 1; --index)
      std::swap(order[index - 1], order[next_random(state.rng) % index]);
  current_launch = &state;
  int status = 0;
  for (unsigned long long index : order) {
    state.block_idx = {static_cast<unsigned>(index % grid.x),
                       static_cast<unsigned>(index / grid.x % grid.y),
                       static_cast<unsigned>(index / (1ull * grid.x * grid.y))};
    memset(tc_dynamic_smem, 0xff, dynamic_shared);  // stale shared memory reads as NaN
    if (!run_block(state)) {
      last_error = state.error;
      status = -1;
      break;
    }
  }
  current_launch = nullptr;
  current_fiber = nullptr;
  return status;
}
}  // namespace tc_emu

#endif /* TILECRAFT_CUDA_EMULATION_H */
