// hls_stream.h: Xilinx's hls::stream for C-simulation with a plain C++ compiler.
//
// C-simulation runs the stages of a dataflow region one after another, in program order, as
// Vitis HLS's C-simulation does; a stream is therefore an unbounded FIFO here (its declared
// depth, the template argument, sizes the hardware FIFO only). It records the largest number
// of values it ever held. Reading an empty stream is an error naming the stream (a stage that
// reads before the stage feeding it has run, or reads more than was written) — thrown as
// tc_hls::SimulationError instead of hanging; tc_hls::check_drained(s) after a region reports
// values left unread.
#ifndef TILECRAFT_HLS_STREAM_H
#define TILECRAFT_HLS_STREAM_H

#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>

namespace tc_hls {

class SimulationError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace tc_hls

namespace hls {

template <typename T, std::size_t Depth = 2>
class stream {
public:
    stream() : name_("unnamed stream") {}
    explicit stream(const char* name) : name_(name) {}
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    void write(const T& value) {
        values_.push_back(value);
        if (values_.size() > high_water_) high_water_ = values_.size();
    }
    T read() {
        if (values_.empty())
            throw tc_hls::SimulationError(
                "C-simulation: stream " + name_ + " read while empty (" +
                std::to_string(reads_) + " values read so far): its producer stage wrote fewer "
                "values than its consumer reads, or runs after it");
        T value = values_.front();
        values_.pop_front();
        ++reads_;
        return value;
    }
    void write(const T& value, bool) { write(value); }
    void read(T& value) { value = read(); }
    stream& operator<<(const T& value) { write(value); return *this; }
    stream& operator>>(T& value) { value = read(); return *this; }
    bool empty() const { return values_.empty(); }
    // unbounded in C-simulation (see the file's comment): never full
    bool full() const { return false; }
    std::size_t size() const { return values_.size(); }
    std::size_t high_water() const { return high_water_; }
    static constexpr std::size_t depth = Depth;
    const std::string& name() const { return name_; }

private:
    std::string name_;
    std::deque<T> values_;
    std::size_t high_water_ = 0;
    std::size_t reads_ = 0;
};

}  // namespace hls

namespace tc_hls {

template <typename T, std::size_t Depth>
void check_drained(const hls::stream<T, Depth>& s) {
    if (!s.empty())
        throw SimulationError("C-simulation: stream " + s.name() + " holds " +
                              std::to_string(s.size()) + " unread value(s) after its dataflow "
                              "region: its producer stage wrote more than its consumer reads");
}

}  // namespace tc_hls

#endif  // TILECRAFT_HLS_STREAM_H
