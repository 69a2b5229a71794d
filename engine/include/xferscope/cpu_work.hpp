// Calibrated CPU work: real arithmetic, not a clock spin, so it occupies a core the way an
// application's own work does.
#pragma once

#include <cstdint>

namespace xferscope {

// Runs `units` units of dummy work (a hash chain kept in a register).
void do_cpu_work(std::uint64_t units);
// Units of work that take about `seconds` on this core (calibrated once, then cached).
std::uint64_t cpu_work_for(double seconds);

}  // namespace xferscope
