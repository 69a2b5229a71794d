// A CUDA C++ heat simulation: a 4096 x 4096 float field (64 MiB, two buffers in turn) diffuses
// and cools each iteration while 64 moving heat sources add to it. The sources are the host
// scene's objects, in a pinned arena (cudaMallocHost): each the 256-byte struct the kernel reads
// (centre, turning elliptical footprint, power, 56-bin profile), then its orbit. Each iteration
// the host moves each source and uploads its struct with its own cudaMemcpy into the device's
// array of 64, then launches the kernel, which sums the 64 at every cell and diffuses the field.
// Cause: 64 small copies (256 bytes each) an iteration, each a cudaMemcpy's fixed cost (the
// call, the copy's setup, the wait for it) while the GPU, done with the kernel before, waits.
// --fixed: the structs packed into one pinned buffer (cudaMallocHost, made once) and uploaded
// with one cudaMemcpy: the same 16 KiB. --resident: the structs of every iteration of the orbits'
// period (512) uploaded before the loop. Prints one JSON line as corpus.py's Loop.report does,
// with the final field's sum ("checksum": the same in every form).
//   cuda_small_structs [--steps N] [--fixed] [--resident]
//   built with nvcc -O2 -g -lineinfo -arch=sm_90 -o cuda_small_structs cuda_small_structs.cu

// cause: small_copies
// fix: the 64 structs packed into one pinned host buffer, uploaded with one cudaMemcpy, not 64
// step: STEP
// resident: yes
// gpus: 1
// needs: nvcc

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "corpus.hpp"

constexpr int kSide = 4096, kCells = kSide * kSide;  // 64 MiB of float
constexpr int kSources = 64, kProfile = 56, kPeriod = 512, kWarmup = 3;
constexpr float kDiffuse = 0.2f, kCool = 1.0e-3f;
constexpr double kPi = 3.14159265358979323846;
constexpr auto kH2D = cudaMemcpyHostToDevice, kD2H = cudaMemcpyDeviceToHost;

struct alignas(16) Source {  // what the kernel reads of a source: 256 bytes
  float x, y;                // its centre, in cells
  float a, b, c;             // its footprint: q = a dx^2 + 2 b dx dy + c dy^2
  float power;               // its heat an iteration, times the profile
  float reach;               // the q past which it adds nothing (kProfile - 1 at most)
  std::uint32_t id;          // the scene's own
  float profile[kProfile];   // its heat over q, at q = 0, 1, ..., kProfile - 1
};
static_assert(sizeof(Source) == 256, "a source's struct is 256 bytes");

struct Object {  // a source in the host's scene: the GPU's struct, then the host's own state
  Source params;
  double cx, cy, rx, ry, turns, spin, phase;  // its orbit (of the side), turns a period, phase
  double sigma1, sigma2, strength;            // its footprint's widths (cells), its mean power
};

// A step of the field: the heat the 64 sources add at each cell, then diffusion and cooling.
__global__ void advance(const float* __restrict__ in, float* __restrict__ out,
                        const Source* __restrict__ sources) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (col >= kSide || row >= kSide) return;
  float heat = 0.0f;
  for (int k = 0; k < kSources; ++k) {
    const Source& s = sources[k];
    const float dx = col - s.x, dy = row - s.y;
    const float q = s.a * dx * dx + 2.0f * s.b * dx * dy + s.c * dy * dy;
    if (q >= s.reach) continue;
    const int bin = static_cast<int>(q);
    heat += s.power * (s.profile[bin] + (q - bin) * (s.profile[bin + 1] - s.profile[bin]));
  }
  const int i = row * kSide + col, up = row > 0 ? -kSide : 0, down = row < kSide - 1 ? kSide : 0;
  const int left = col > 0 ? -1 : 0, right = col < kSide - 1 ? 1 : 0;
  const float here = in[i], around = in[i + up] + in[i + down] + in[i + left] + in[i + right];
  out[i] = here + kDiffuse * (around - 4.0f * here) - kCool * here + heat;
}

using corpus::next, corpus::noise, corpus::uniform;  // the random start (corpus.hpp)

// The host's update of a source for iteration i: along its orbit, its footprint turned.
void move(Object& o, int i) {
  const double t = static_cast<double>(i % kPeriod) / kPeriod;
  const double orbit = 2 * kPi * (o.turns * t + o.phase), turn = 2 * kPi * (o.spin * t + o.phase);
  const double co = std::cos(turn), si = std::sin(turn);
  const double p = 1 / (o.sigma1 * o.sigma1), q = 1 / (o.sigma2 * o.sigma2);
  Source& s = o.params;
  s.x = float(kSide * (o.cx + o.rx * std::cos(orbit)));
  s.y = float(kSide * (o.cy + o.ry * std::sin(orbit)));
  s.a = float(p * co * co + q * si * si), s.b = float((p - q) * co * si);
  s.c = float(p * si * si + q * co * co);
  s.power = float(o.strength * (1 + 0.25 * std::sin(2 * orbit)));
}

int main(int argc, char** argv) {
  const corpus::Options o = corpus::options(argc, argv, 2000);
  const int steps = o.steps;
  const bool fixed = o.fixed, resident = o.resident;
  Object* scene = nullptr;   // the scene's objects, pinned
  Source* packed = nullptr;  // the fixed form's staging buffer, pinned
  CHECK(cudaMallocHost(&scene, kSources * sizeof(Object)));
  if (fixed) CHECK(cudaMallocHost(&packed, kSources * sizeof(Source)));
  for (int k = 0; k < kSources; ++k) {
    Object& o = scene[k];
    o.cx = uniform(0.3, 0.7), o.cy = uniform(0.3, 0.7), o.rx = uniform(0.05, 0.25);
    o.ry = uniform(0.05, 0.25), o.turns = 1 + int(uniform(0, 3)), o.spin = 1 + int(uniform(0, 6));
    o.sigma1 = uniform(8, 32), o.sigma2 = uniform(8, 32), o.strength = uniform(0.01, 0.05);
    o.phase = uniform(), o.params.reach = float(uniform(40, 55)), o.params.id = k;
    for (int j = 0; j < kProfile; ++j)
      o.params.profile[j] = float(std::exp(-j / 8.0) * uniform(0.9, 1.1));
  }
  float* field[2] = {nullptr, nullptr};
  for (float*& f : field) CHECK(cudaMalloc(&f, kCells * sizeof(float)));
  std::vector<float> host(kCells);
  for (float& v : host) v = float(uniform());
  CHECK(cudaMemcpy(field[0], host.data(), kCells * sizeof(float), kH2D));
  Source *d_src = nullptr, *d_all = nullptr;
  CHECK(cudaMalloc(&d_src, kSources * sizeof(Source)));
  if (resident) {  // every iteration of the period's structs, packed and uploaded once
    std::vector<Source> all;
    for (int i = 0; i < kPeriod; ++i)
      for (Object* o = scene; o < scene + kSources; ++o) move(*o, i), all.push_back(o->params);
    CHECK(cudaMalloc(&d_all, all.size() * sizeof(Source)));
    CHECK(cudaMemcpy(d_all, all.data(), all.size() * sizeof(Source), kH2D));
  }
  const dim3 threads(32, 8), blocks(kSide / 32, kSide / 8);
  auto step = [&](int i) {  // the sources moved and uploaded, the field advanced
    if (!resident) {
      for (int k = 0; k < kSources; ++k) {
        move(scene[k], i);
        if (fixed)
          packed[k] = scene[k].params;
        else
          CHECK(cudaMemcpy(d_src + k, &scene[k].params, sizeof(Source), kH2D));  // STEP
      }
      if (fixed) CHECK(cudaMemcpy(d_src, packed, kSources * sizeof(Source), kH2D));  // STEP
    }
    const Source* now = resident ? d_all + (i % kPeriod) * kSources : d_src;
    advance<<<blocks, threads>>>(field[i % 2], field[(i + 1) % 2], now);
    CHECK(cudaGetLastError());
  };
  corpus::Loop loop;
  loop.run(step, kWarmup, steps);
  CHECK(cudaMemcpy(host.data(), field[(kWarmup + steps) % 2], kCells * sizeof(float), kD2H));
  double checksum = 0;
  for (float v : host) checksum += v;
  loop.report("cuda_small_structs", o, corpus::checksum(checksum));
  return 0;  // the host's and the device's memory freed with the process
}
