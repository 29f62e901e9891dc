/* tilecraft_ascendc.h: a host (g++) emulation of the shape of CANN's AscendC kernel-operator
 * API, for the AscendC-style C++ that tilecraft's ascend_npu plugin generates.
 *
 * No CANN toolchain can be installed here, so generated kernels are compiled against this
 * header and run on the CPU. What it emulates, and checks:
 *
 *  - memory levels: a TPipe hands out buffers per TPosition (VECIN / VECOUT / VECCALC / CO2 in
 *    the Unified Buffer, A1 / B1 in L1, A2 in L0A, B2 in L0B, CO1 in L0C); the capacity of each
 *    level comes from the spec (TC_ASCEND_<LEVEL>_BYTES, defined by the generated source
 *    before including this header) and InitBuffer beyond it is an error naming the level and
 *    the sizes;
 *  - queues (TQue<position, depth>): AllocTensor / EnQue / DeQue / FreeTensor with their
 *    discipline enforced: DeQue of an empty queue, EnQue beyond the depth, AllocTensor with
 *    every buffer in use, a tensor freed without ever being EnQue'd, a tensor used while it
 *    sits in a queue, a tensor still allocated when the kernel ends: all errors;
 *  - GlobalTensor / LocalTensor with bounds-checked GetValue / SetValue (the scalar unit
 *    cannot address L1 or L0: an error there too);
 *  - DataCopy / DataCopyPad between GM and UB / L1, DataCopy UB -> L1 (DataCopy in whole 32-byte blocks, as the
 *    MTE moves them; DataCopyPad any byte length), LoadData L1 -> L0A (zZ fractals) / L0B (nZ
 *    fractals), Mmad on the Cube (fp16 x fp16 -> fp32, int8 x int8 -> int32, operands checked
 *    to be in L0A / L0B in fractal layout), Fixpipe L0C (NZ fractals) -> UB (row-major);
 *  - vector ops on UB operands (32-byte aligned starts): Add, Sub, Mul, Div, Max, Min, Adds,
 *    Muls, Maxs, Mins, Exp, Ln, Abs, Sqrt, Relu, Duplicate, Cast (round modes), ReduceSum,
 *    ReduceMax, ReduceMin — computed in float and rounded to the element type per element;
 *  - half: a 16-bit IEEE type, converted from float with round-to-nearest-even (numpy's
 *    float16).
 *
 * AI cores: the harness runs the kernel once per block index, one after another (GetBlockIdx()
 * / GetBlockNum()); the pipes (MTE2, MTE1, Cube, Vector, MTE3) are not overlapped, so queue
 * depth 2 (double buffering) changes no result here, only what the hardware may overlap.
 * Errors are thrown as tc_ascend::KernelError and turned into a message by the harness.
 */
#ifndef TILECRAFT_ASCENDC_H
#define TILECRAFT_ASCENDC_H

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string>
#include <vector>

#define __global__
#define __aicore__
#define __gm__
typedef uint8_t* GM_ADDR;

#ifndef TC_ASCEND_L1_BYTES
#error "define TC_ASCEND_L1_BYTES (and the other level capacities) from the target spec"
#endif

namespace tc_ascend {

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  throw KernelError(text);
}

/* an error found where throwing is not allowed (a destructor): the harness reports it */
inline std::string& deferred_error() {
  static std::string message;
  return message;
}
inline int& block_idx() { static int value = 0; return value; }
inline int& block_num() { static int value = 1; return value; }

}  // namespace tc_ascend

/* ---- half: IEEE binary16 storage, float arithmetic, round to nearest even --------------- */
struct half {
  uint16_t bits = 0;
  half() = default;
  half(float value) : bits(from_float(value)) {}  // NOLINT: implicit, as the real half
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    uint32_t sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
    if (magnitude < 0x38800000u) {  // subnormal half (or zero)
      float scaled = std::fabs(value) * 16777216.0f;  // 2^24: units of the smallest subnormal
      uint32_t units = static_cast<uint32_t>(std::nearbyint(scaled));  // ties to even
      return static_cast<uint16_t>(sign | units);
    }
    uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  static float to_float(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t x;
    if (exponent == 0x1fu) {
      x = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent == 0) {
      float v = std::ldexp(static_cast<float>(mantissa), -24);
      return sign ? -v : v;
    } else {
      x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
    float out;
    std::memcpy(&out, &x, 4);
    return out;
  }
};

namespace AscendC {

enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, B1, A2, B2, CO1, CO2 };
enum class RoundMode { CAST_NONE, CAST_RINT, CAST_ROUND, CAST_FLOOR, CAST_CEIL, CAST_TRUNC };
enum class Layout { ND, ZZ, NZ };

inline const char* level_of(TPosition position) {
  switch (position) {
    case TPosition::A1: case TPosition::B1: return "L1";
    case TPosition::A2: return "L0A";
    case TPosition::B2: return "L0B";
    case TPosition::CO1: return "L0C";
    case TPosition::GM: return "GM";
    default: return "UB";
  }
}
inline long long capacity_of(const char* level) {
  if (!std::strcmp(level, "L1")) return TC_ASCEND_L1_BYTES;
  if (!std::strcmp(level, "L0A")) return TC_ASCEND_L0A_BYTES;
  if (!std::strcmp(level, "L0B")) return TC_ASCEND_L0B_BYTES;
  if (!std::strcmp(level, "L0C")) return TC_ASCEND_L0C_BYTES;
  return TC_ASCEND_UB_BYTES;
}
inline bool scalar_addressable(TPosition position) {
  return level_of(position)[0] == 'U' || position == TPosition::GM;
}

inline int64_t GetBlockIdx() { return tc_ascend::block_idx(); }
inline int64_t GetBlockNum() { return tc_ascend::block_num(); }

/* one buffer of a queue or TBuf: who owns it and where it is in the queue discipline */
struct Slot {
  const char* owner = "?";
  bool queued_kind = false;  // a TQue's buffer (false: a TBuf's)
  bool allocated = false;
  bool in_queue = false;
  bool ever_enqueued = false;
  Layout layout = Layout::ND;
};

template <typename T>
class LocalTensor {
 public:
  T* data = nullptr;
  uint32_t size = 0;  // elements from data to the end of the buffer
  TPosition position = TPosition::VECCALC;
  Slot* slot = nullptr;

  LocalTensor operator[](uint32_t offset) const {
    if (offset > size) tc_ascend::fail("offset %u outside %s's %u elements", offset, name(), size);
    LocalTensor view = *this;
    view.data += offset;
    view.size -= offset;
    return view;
  }
  const char* name() const { return slot ? slot->owner : "an unallocated LocalTensor"; }
  void check_usable(const char* what) const {
    if (slot == nullptr || !slot->allocated)
      tc_ascend::fail("%s on %s: the tensor is not allocated (AllocTensor / Get first)", what,
                      name());
    if (slot->in_queue)
      tc_ascend::fail("%s on %s while it sits in its queue: DeQue it first", what, name());
  }
  void check_range(uint32_t count, const char* what) const {
    check_usable(what);
    if (count > size)
      tc_ascend::fail("%s of %u elements on %s, which has %u from there", what, count, name(),
                      size);
  }
  T GetValue(uint32_t index) const {
    check_scalar("GetValue", index);
    return data[index];
  }
  void SetValue(uint32_t index, T value) const {
    check_scalar("SetValue", index);
    data[index] = value;
  }
  uint32_t GetSize() const { return size; }

 private:
  void check_scalar(const char* what, uint32_t index) const {
    check_usable(what);
    if (!scalar_addressable(position))
      tc_ascend::fail("%s on %s in %s: the scalar unit addresses only UB and GM", what, name(),
                      level_of(position));
    if (index >= size)
      tc_ascend::fail("%s(%u) outside %s (%u elements from there)", what, index, name(), size);
  }
};

template <typename T>
class GlobalTensor {
 public:
  T* data = nullptr;
  uint64_t size = 0;
  void SetGlobalBuffer(__gm__ T* buffer, uint64_t elements) {
    data = buffer;
    size = elements;
  }
  GlobalTensor operator[](uint64_t offset) const {
    if (offset > size) tc_ascend::fail("GM offset %llu outside a buffer of %llu elements",
                                       (unsigned long long)offset, (unsigned long long)size);
    GlobalTensor view = *this;
    view.data += offset;
    view.size -= offset;
    return view;
  }
  T GetValue(uint64_t index) const { check(index); return data[index]; }
  void SetValue(uint64_t index, T value) const { check(index); data[index] = value; }

 private:
  void check(uint64_t index) const {
    if (index >= size) tc_ascend::fail("GM access %llu outside a buffer of %llu elements",
                                       (unsigned long long)index, (unsigned long long)size);
  }
};

/* buffers of one pipe: their bytes per level, checked against the level's capacity */
class TPipe {
 public:
  TPipe() = default;
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;

  template <typename Queue>
  void InitBuffer(Queue& queue, int num, uint32_t bytes) {
    queue.bind(reserve(queue.label, Queue::position, num, bytes), num, bytes);
  }
  template <typename Buf>
  void InitBuffer(Buf& buffer, uint32_t bytes) {
    buffer.bind(reserve(buffer.label, Buf::position, 1, bytes), bytes);
  }

 private:
  struct Level { const char* name; long long used; };
  std::vector<Level> levels_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;

  uint8_t* reserve(const char* label, TPosition position, int num, uint32_t bytes) {
    const char* level = level_of(position);
    long long padded = (static_cast<long long>(bytes) + 31) / 32 * 32;
    long long need = padded * num;
    Level* entry = nullptr;
    for (auto& candidate : levels_)
      if (!std::strcmp(candidate.name, level)) entry = &candidate;
    if (!entry) { levels_.push_back({level, 0}); entry = &levels_.back(); }
    long long capacity = capacity_of(level);
    if (entry->used + need > capacity)
      tc_ascend::fail("InitBuffer of %s: %d x %lld bytes in %s overflow the level: %lld bytes "
                      "already in use, %lld the capacity", label, num, padded, level,
                      entry->used, capacity);
    entry->used += need;
    memory_.emplace_back(new uint8_t[need + 64]);
    uint8_t* raw = memory_.back().get();
    uint8_t* aligned = raw + ((64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64);
    std::memset(aligned, 0xa5, need);  // garbage, as fresh hardware buffers hold
    return aligned;
  }
};

template <TPosition Position, int Depth>
class TQue {
 public:
  static constexpr TPosition position = Position;
  const char* label = "a queue";

  TQue() = default;
  TQue(const TQue&) = delete;
  ~TQue() {
    if (std::uncaught_exceptions() || !tc_ascend::deferred_error().empty()) return;
    for (auto& slot : slots_)
      if (slot.allocated) {
        tc_ascend::deferred_error() = std::string("a tensor of queue ") + label +
            " is still allocated when the kernel ends: FreeTensor it (a leak)";
        return;
      }
  }
  void bind(uint8_t* memory, int num, uint32_t bytes) {
    if (num > Depth) tc_ascend::fail("InitBuffer of %s with %d buffers: the queue's depth is %d",
                                     label, num, Depth);
    memory_ = memory;
    bytes_ = (bytes + 31) / 32 * 32;
    slots_.assign(num, Slot{});
    for (auto& slot : slots_) { slot.owner = label; slot.queued_kind = true; }
  }
  template <typename T>
  LocalTensor<T> AllocTensor() {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.allocated) continue;
      slot = Slot{label, true, true, false, false, Layout::ND};
      return tensor<T>(i);
    }
    if (slots_.empty()) tc_ascend::fail("AllocTensor on %s before InitBuffer", label);
    tc_ascend::fail("AllocTensor on %s: all %zu buffers are in use (a FreeTensor is missing)",
                    label, slots_.size());
  }
  template <typename T>
  void EnQue(const LocalTensor<T>& t) {
    Slot* slot = own(t, "EnQue");
    if (slot->in_queue) tc_ascend::fail("EnQue on %s of a tensor already in it", label);
    if (static_cast<int>(fifo_.size()) >= Depth)
      tc_ascend::fail("EnQue on %s beyond its depth %d", label, Depth);
    slot->in_queue = slot->ever_enqueued = true;
    fifo_.push_back(slot);
  }
  template <typename T>
  LocalTensor<T> DeQue() {
    if (fifo_.empty())
      tc_ascend::fail("DeQue of the empty queue %s: no tensor was EnQue'd into it", label);
    Slot* slot = fifo_.front();
    fifo_.pop_front();
    slot->in_queue = false;
    return tensor<T>(static_cast<size_t>(slot - slots_.data()));
  }
  template <typename T>
  void FreeTensor(const LocalTensor<T>& t) {
    Slot* slot = own(t, "FreeTensor");
    if (slot->in_queue) tc_ascend::fail("FreeTensor on %s of a tensor still in it", label);
    if (!slot->ever_enqueued)
      tc_ascend::fail("FreeTensor on %s of a tensor never EnQue'd: the hand-off between "
                      "stages is missing", label);
    slot->allocated = false;
  }

 private:
  uint8_t* memory_ = nullptr;
  uint32_t bytes_ = 0;
  std::vector<Slot> slots_;
  std::deque<Slot*> fifo_;

  template <typename T>
  LocalTensor<T> tensor(size_t index) {
    LocalTensor<T> t;
    t.data = reinterpret_cast<T*>(memory_ + index * bytes_);
    t.size = bytes_ / sizeof(T);
    t.position = Position;
    t.slot = &slots_[index];
    return t;
  }
  template <typename T>
  Slot* own(const LocalTensor<T>& t, const char* what) {
    Slot* slot = t.slot;
    if (slot == nullptr || slot < slots_.data() || slot >= slots_.data() + slots_.size())
      tc_ascend::fail("%s on %s of a tensor of another queue (%s)", what, label, t.name());
    if (!slot->allocated) tc_ascend::fail("%s on %s of a tensor not allocated", what, label);
    return slot;
  }
};

template <TPosition Position = TPosition::VECCALC>
class TBuf {
 public:
  static constexpr TPosition position = Position;
  const char* label = "a buffer";
  void bind(uint8_t* memory, uint32_t bytes) {
    memory_ = memory;
    bytes_ = bytes;
    slot_ = Slot{label, false, true, false, true, Layout::ND};
  }
  template <typename T>
  LocalTensor<T> Get() {
    if (!memory_) tc_ascend::fail("Get on %s before InitBuffer", label);
    LocalTensor<T> t;
    t.data = reinterpret_cast<T*>(memory_);
    t.size = bytes_ / sizeof(T);
    t.position = Position;
    t.slot = &slot_;
    return t;
  }

 private:
  uint8_t* memory_ = nullptr;
  uint32_t bytes_ = 0;
  Slot slot_;
};

/* ---- data movement --------------------------------------------------------------------- */
struct DataCopyExtParams {
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;  // bytes per block (any length: DataCopyPad)
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};
template <typename T>
struct DataCopyPadExtParams {
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue = T();
};

template <typename T>
inline void check_blocks(uint32_t count, const char* what) {
  if ((count * sizeof(T)) % 32 != 0)
    tc_ascend::fail("%s of %u elements (%zu bytes): DataCopy moves whole 32-byte blocks; use "
                    "DataCopyPad", what, count, count * sizeof(T));
}
template <typename T>
inline void check_gm(const GlobalTensor<T>& g, uint64_t count, const char* what) {
  if (count > g.size) tc_ascend::fail("%s of %llu elements beyond a GM buffer of %llu", what,
                                      (unsigned long long)count, (unsigned long long)g.size);
}
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count) {
  check_blocks<T>(count, "DataCopy GM -> local");
  dst.check_range(count, "DataCopy");
  check_gm(src, count, "DataCopy");
  std::memcpy(dst.data, src.data, count * sizeof(T));
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count) {
  check_blocks<T>(count, "DataCopy local -> GM");
  src.check_range(count, "DataCopy");
  check_gm(dst, count, "DataCopy");
  std::memcpy(dst.data, src.data, count * sizeof(T));
}
// UB -> L1 (a fused chain's intermediate on its way from Fixpipe to LoadData): whole
// 32-byte blocks, from a Unified Buffer tensor into an A1 / B1 tensor only
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count) {
  check_blocks<T>(count, "DataCopy UB -> L1");
  if (std::string(level_of(src.position)) != "UB" || std::string(level_of(dst.position)) != "L1")
    tc_ascend::fail("DataCopy from %s in %s to %s in %s: between local tensors only UB -> L1 "
                    "is modelled", src.name(), level_of(src.position), dst.name(),
                    level_of(dst.position));
  src.check_range(count, "DataCopy");
  dst.check_range(count, "DataCopy");
  std::memcpy(dst.data, src.data, count * sizeof(T));
}
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                        const DataCopyExtParams& params, const DataCopyPadExtParams<T>&) {
  uint32_t count = params.blockLen / sizeof(T);
  if (params.blockCount != 1) tc_ascend::fail("DataCopyPad: the emulation moves one block");
  dst.check_range(count, "DataCopyPad");
  check_gm(src, count, "DataCopyPad");
  std::memcpy(dst.data, src.data, count * sizeof(T));
}
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                        const DataCopyExtParams& params) {
  uint32_t count = params.blockLen / sizeof(T);
  if (params.blockCount != 1) tc_ascend::fail("DataCopyPad: the emulation moves one block");
  src.check_range(count, "DataCopyPad");
  check_gm(dst, count, "DataCopyPad");
  std::memcpy(dst.data, src.data, count * sizeof(T));
}

/* fill a local tensor (UB, L1, L0) with one value: InitConstValue's effect */
template <typename T>
struct InitConstValueParams {
  uint16_t repeatTimes = 1;
  uint16_t blockNum = 0;  // 32-byte blocks per repeat
  uint16_t dstGap = 0;
  T initValue = T();
};
template <typename T>
inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<T>& params) {
  uint32_t count = params.repeatTimes * params.blockNum * 32 / sizeof(T);
  dst.check_range(count, "InitConstValue");
  for (uint32_t i = 0; i < count; ++i) dst.data[i] = params.initValue;
  if (dst.slot) dst.slot->layout = Layout::ND;
}

/* L1 (row-major tile of rows x cols) -> L0A as zZ fractals, or -> L0B as nZ fractals (each
 * fractal holds the 16x16 block transposed: [n2][k2], the Cube's right operand) */
struct LoadData2DParams {
  uint16_t rows = 16;
  uint16_t cols = 16;
};
constexpr int FRACTAL = 16;
template <typename T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                     const LoadData2DParams& params) {
  if (src.position != TPosition::A1 && src.position != TPosition::B1)
    tc_ascend::fail("LoadData from %s in %s: the source must be in L1 (A1 / B1)", src.name(),
                    level_of(src.position));
  bool left = dst.position == TPosition::A2;
  if (!left && dst.position != TPosition::B2)
    tc_ascend::fail("LoadData into %s in %s: the destination must be L0A or L0B", dst.name(),
                    level_of(dst.position));
  int rows = params.rows, cols = params.cols;
  if (rows % FRACTAL || cols % FRACTAL)
    tc_ascend::fail("LoadData of a %dx%d tile into %s: fractals are 16x16", rows, cols,
                    dst.name());
  uint32_t count = static_cast<uint32_t>(rows) * cols;
  src.check_range(count, "LoadData");
  dst.check_range(count, "LoadData");
  int blocks_per_row = cols / FRACTAL;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      int fractal = (r / FRACTAL) * blocks_per_row + c / FRACTAL;
      int inner = left ? (r % FRACTAL) * FRACTAL + c % FRACTAL    // zZ: [m2][k2]
                       : (c % FRACTAL) * FRACTAL + r % FRACTAL;   // nZ: [n2][k2]
      dst.data[fractal * FRACTAL * FRACTAL + inner] = src.data[r * cols + c];
    }
  dst.slot->layout = left ? Layout::ZZ : Layout::NZ;
}

struct MmadParams {
  uint16_t m = 16;
  uint16_t n = 16;
  uint16_t k = 16;
  bool cmatrixInitVal = false;  // true: C = A·B, without reading C
};
/* C (L0C, NZ fractals: fractal (m1, n1) at n1 * M1 + m1, elements [m2][n2]) += A (L0A, zZ,
 * m x k) * B (L0B, nZ, k x n), products and sums in the accumulator's type */
template <typename C, typename A, typename B>
inline void Mmad(const LocalTensor<C>& c, const LocalTensor<A>& a, const LocalTensor<B>& b,
                 const MmadParams& params) {
  if (a.position != TPosition::A2 || b.position != TPosition::B2 || c.position != TPosition::CO1)
    tc_ascend::fail("Mmad(%s, %s, %s): operands must be in L0C, L0A, L0B (they are in %s, %s, "
                    "%s)", c.name(), a.name(), b.name(), level_of(c.position),
                    level_of(a.position), level_of(b.position));
  a.check_usable("Mmad");
  b.check_usable("Mmad");
  c.check_usable("Mmad");
  if (a.slot->layout != Layout::ZZ || b.slot->layout != Layout::NZ)
    tc_ascend::fail("Mmad: the Cube operand %s is not in fractal layout (LoadData it into "
                    "L0A as zZ / L0B as nZ)", a.slot->layout != Layout::ZZ ? a.name() : b.name());
  int m = params.m, n = params.n, k = params.k;
  if (m % FRACTAL || n % FRACTAL || k % FRACTAL)
    tc_ascend::fail("Mmad %dx%dx%d: m, n, k must be multiples of 16", m, n, k);
  a.check_range(static_cast<uint32_t>(m) * k, "Mmad (left)");
  b.check_range(static_cast<uint32_t>(k) * n, "Mmad (right)");
  c.check_range(static_cast<uint32_t>(m) * n, "Mmad (result)");
  int m1s = m / FRACTAL, n1s = n / FRACTAL, k1s = k / FRACTAL;
  for (int m1 = 0; m1 < m1s; ++m1)
    for (int n1 = 0; n1 < n1s; ++n1) {
      C* out = c.data + (n1 * m1s + m1) * FRACTAL * FRACTAL;
      for (int m2 = 0; m2 < FRACTAL; ++m2)
        for (int n2 = 0; n2 < FRACTAL; ++n2) {
          C sum = params.cmatrixInitVal ? C(0) : out[m2 * FRACTAL + n2];
          for (int k1 = 0; k1 < k1s; ++k1) {
            const A* left = a.data + (m1 * k1s + k1) * FRACTAL * FRACTAL + m2 * FRACTAL;
            const B* right = b.data + (k1 * n1s + n1) * FRACTAL * FRACTAL + n2 * FRACTAL;
            for (int k2 = 0; k2 < FRACTAL; ++k2)
              sum += static_cast<C>(static_cast<float>(left[k2])) *
                     static_cast<C>(static_cast<float>(right[k2]));
          }
          out[m2 * FRACTAL + n2] = sum;
        }
    }
  c.slot->layout = Layout::NZ;
}

/* L0C (NZ fractals) -> UB, row-major rows x cols (Fixpipe with NZ2ND), converted to the
 * destination's type on the way (F322F16 rounds to nearest even) */
struct FixpipeParams {
  uint16_t rows = 16;
  uint16_t cols = 16;
};
template <typename D, typename S>
inline void Fixpipe(const LocalTensor<D>& dst, const LocalTensor<S>& src,
                    const FixpipeParams& params) {
  if (src.position != TPosition::CO1)
    tc_ascend::fail("Fixpipe from %s in %s: the source must be in L0C", src.name(),
                    level_of(src.position));
  int rows = params.rows, cols = params.cols;
  uint32_t count = static_cast<uint32_t>(rows) * cols;
  src.check_range(count, "Fixpipe");
  dst.check_range(count, "Fixpipe");
  int m1s = rows / FRACTAL;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst.data[r * cols + c] = static_cast<D>(static_cast<float>(
          src.data[((c / FRACTAL) * m1s + r / FRACTAL) * FRACTAL * FRACTAL +
                   (r % FRACTAL) * FRACTAL + c % FRACTAL]));
}

/* ---- vector unit (operands in UB, starts 32-byte aligned) ------------------------------ */
template <typename T>
inline void vector_operand(const LocalTensor<T>& t, uint32_t count, const char* what) {
  t.check_range(count, what);
  if (level_of(t.position)[0] != 'U')
    tc_ascend::fail("%s on %s in %s: vector operands live in UB", what, t.name(),
                    level_of(t.position));
  if (reinterpret_cast<uintptr_t>(t.data) % 32)
    tc_ascend::fail("%s on %s: the operand does not start on a 32-byte block", what, t.name());
}
template <typename T>
inline T tc_store(float value) { return static_cast<T>(value); }

#define TC_ASCEND_BINARY(NAME, EXPRESSION)                                                   \
  template <typename T>                                                                      \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& a,                       \
                   const LocalTensor<T>& b, int32_t count) {                                 \
    vector_operand(dst, count, #NAME); vector_operand(a, count, #NAME);                      \
    vector_operand(b, count, #NAME);                                                         \
    for (int32_t i = 0; i < count; ++i) {                                                    \
      float x = static_cast<float>(a.data[i]), y = static_cast<float>(b.data[i]);            \
      dst.data[i] = tc_store<T>(EXPRESSION);                                                 \
    }                                                                                        \
  }
TC_ASCEND_BINARY(Add, x + y)
TC_ASCEND_BINARY(Sub, x - y)
TC_ASCEND_BINARY(Mul, x * y)
TC_ASCEND_BINARY(Div, x / y)
TC_ASCEND_BINARY(Max, (x != x || x > y) ? x : y)
TC_ASCEND_BINARY(Min, (x != x || x < y) ? x : y)
#undef TC_ASCEND_BINARY

#define TC_ASCEND_SCALAR(NAME, EXPRESSION)                                                   \
  template <typename T>                                                                      \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& a, T scalar,             \
                   int32_t count) {                                                          \
    vector_operand(dst, count, #NAME); vector_operand(a, count, #NAME);                      \
    float y = static_cast<float>(scalar);                                                    \
    for (int32_t i = 0; i < count; ++i) {                                                    \
      float x = static_cast<float>(a.data[i]);                                               \
      dst.data[i] = tc_store<T>(EXPRESSION);                                                 \
    }                                                                                        \
  }
TC_ASCEND_SCALAR(Adds, x + y)
TC_ASCEND_SCALAR(Muls, x * y)
TC_ASCEND_SCALAR(Maxs, (x != x || x > y) ? x : y)
TC_ASCEND_SCALAR(Mins, (x != x || x < y) ? x : y)
#undef TC_ASCEND_SCALAR

#define TC_ASCEND_UNARY(NAME, EXPRESSION)                                                    \
  template <typename T>                                                                      \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& a, int32_t count) {     \
    vector_operand(dst, count, #NAME); vector_operand(a, count, #NAME);                      \
    for (int32_t i = 0; i < count; ++i) {                                                    \
      float x = static_cast<float>(a.data[i]);                                               \
      dst.data[i] = tc_store<T>(EXPRESSION);                                                 \
    }                                                                                        \
  }
TC_ASCEND_UNARY(Exp, std::exp(x))
TC_ASCEND_UNARY(Ln, std::log(x))
TC_ASCEND_UNARY(Abs, std::fabs(x))
TC_ASCEND_UNARY(Sqrt, std::sqrt(x))
TC_ASCEND_UNARY(Relu, (x != x || x > 0.0f) ? x : 0.0f)
#undef TC_ASCEND_UNARY

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, T value, int32_t count) {
  vector_operand(dst, count, "Duplicate");
  for (int32_t i = 0; i < count; ++i) dst.data[i] = value;
}

template <typename D, typename S>
inline void Cast(const LocalTensor<D>& dst, const LocalTensor<S>& src, RoundMode mode,
                 int32_t count) {
  vector_operand(dst, count, "Cast");
  vector_operand(src, count, "Cast");
  for (int32_t i = 0; i < count; ++i) {
    float x = static_cast<float>(src.data[i]);
    switch (mode) {
      case RoundMode::CAST_FLOOR: x = std::floor(x); break;
      case RoundMode::CAST_CEIL: x = std::ceil(x); break;
      case RoundMode::CAST_TRUNC: x = std::trunc(x); break;
      case RoundMode::CAST_ROUND: x = std::round(x); break;
      default: break;  // CAST_NONE / CAST_RINT: to nearest even on narrowing
    }
    dst.data[i] = static_cast<D>(x);
  }
}

/* whole-vector reductions: dst[0] = the reduction of src[0, count) (work: scratch space) */
#define TC_ASCEND_REDUCE(NAME, START, STEP)                                                  \
  template <typename T>                                                                      \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src,                     \
                   const LocalTensor<T>& work, int32_t count) {                              \
    vector_operand(dst, 1, #NAME); vector_operand(src, count, #NAME);                        \
    vector_operand(work, 1, #NAME);                                                          \
    float acc = START;                                                                       \
    for (int32_t i = 0; i < count; ++i) {                                                    \
      float x = static_cast<float>(src.data[i]);                                             \
      acc = STEP;                                                                            \
    }                                                                                        \
    dst.data[0] = tc_store<T>(acc);                                                          \
  }
TC_ASCEND_REDUCE(ReduceSum, 0.0f, acc + x)
TC_ASCEND_REDUCE(ReduceMax, -INFINITY, (x != x || x > acc) ? x : acc)
TC_ASCEND_REDUCE(ReduceMin, INFINITY, (x != x || x < acc) ? x : acc)
#undef TC_ASCEND_REDUCE

}  // namespace AscendC

/* tilecraft's scalar semantics (te): Python's floor division and modulo (0 for a zero
 * divisor), NaN-propagating max / min, saturating float -> int */
#define TC_INFINITY INFINITY
#define TC_NAN NAN
inline int tc_floordiv(int a, int b) {
  if (b == 0) return 0;
  int q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int tc_floormod(int a, int b) {
  if (b == 0) return 0;
  int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline float tc_max(float a, float b) { return (a != a || a > b) ? a : b; }
inline float tc_min(float a, float b) { return (a != a || a < b) ? a : b; }
inline int tc_max(int a, int b) { return a > b ? a : b; }
inline int tc_min(int a, int b) { return a < b ? a : b; }
inline int tc_abs(int a) { return a < 0 ? -a : a; }
inline int tc_float_to_int(float x, int low, int high) {
  float t = std::trunc(x);
  if (t != t) return 0;
  if (t <= static_cast<float>(low)) return low;
  if (t >= static_cast<float>(high)) return high;
  return static_cast<int>(t);
}
inline float tc_round_half(float x) { return static_cast<float>(half(x)); }

#endif /* TILECRAFT_ASCENDC_H */
