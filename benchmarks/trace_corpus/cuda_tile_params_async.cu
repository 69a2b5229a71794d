// A CUDA C++ camera pipeline's develop stage, replaying a captured clip: 4096 x 3072 frames
// (RGBA8, 48 MiB each) already in a ring of four on the GPU, each developed in 192 tiles of
// 256 x 256 with local parameters: per tile, white-balance gains and an exposure, a colour matrix
// and a 16-knot tone curve, a 128-byte struct. The host's 3A controller turns each frame's
// per-tile statistics (the sensor's embedded data, replayed from the clip's 512 frames) into the
// tiles' parameters, written into one pinned buffer (cudaMallocHost, made once), and uploads
// each tile's struct with its own cudaMemcpyAsync on the work stream as soon as it is tuned;
// then the develop kernel (a few hundred us) blends each pixel's four nearest tiles' results,
// keeps a recursive temporal average (float4) and writes the 8-bit frame for the encoder (left
// out). The host synchronizes the stream once an iteration, at its end: the pinned buffer is
// rewritten by the next iteration. Cause: 192 small copies (128 bytes each) an iteration, each a
// cudaMemcpyAsync's fixed cost on the host while the GPU, done with the frame before, waits.
// --fixed: the tiles tuned first, then the pinned buffer, already packed, uploaded with one
// cudaMemcpyAsync: the same 24 KiB. --resident: the clip's 512 frames of parameters tuned and
// uploaded before the loop (12 MiB), each frame developed with its own, and no wait an iteration
// (no pinned buffer to rewrite). Prints one JSON line as corpus.py's Loop.report does, with the
// final temporal average's sum ("checksum": the same in every form).
//   cuda_tile_params_async [--steps N] [--fixed] [--resident]
//   built with
//   nvcc -O2 -g -lineinfo -arch=sm_90 -o cuda_tile_params_async cuda_tile_params_async.cu

// cause: small_copies
// fix: the 192 tiles' structs, packed in the pinned buffer, uploaded with one cudaMemcpyAsync
// step: STEP
// resident: yes
// gpus: 1
// needs: nvcc

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "corpus.hpp"

constexpr int kWidth = 4096, kHeight = 3072, kPixels = kWidth * kHeight;  // a 12.6 MP frame
constexpr int kTile = 256, kTilesX = kWidth / kTile, kTilesY = kHeight / kTile;
constexpr int kTiles = kTilesX * kTilesY;  // 192
constexpr int kKnots = 16, kRing = 4, kPeriod = 512, kWarmup = 3;
constexpr float kBlend = 0.25f;  // the temporal average's weight of the new frame
constexpr double kPi = 3.14159265358979323846;
constexpr auto kH2D = cudaMemcpyHostToDevice, kD2H = cudaMemcpyDeviceToHost;

struct alignas(16) TileParams {  // what the kernel reads of a tile: 128 bytes
  float gain[4];                 // white-balance gains (red, green, blue), then the exposure
  float ccm[3][4];               // the colour matrix, each row's offset last
  float curve[kKnots];           // the local tone curve at kKnots even steps over [0, 1]
};
static_assert(sizeof(TileParams) == 128, "a tile's struct is 128 bytes");
constexpr std::size_t kTileBytes = sizeof(TileParams), kAllBytes = kTiles * kTileBytes;  // 24 KiB

// A tile's own, in the host's 3A controller.
struct Tile {
  double scene, phase, tint;  // its part of the scene's brightness, its light's phase and tint
  double shading;             // the lens's fall-off there, as a gain
};

// A channel's value through a tile's tone curve.
__device__ float tone(const float* curve, float v) {
  const float x = fminf(fmaxf(v, 0.0f), 1.0f) * (kKnots - 1);
  const int j = min(static_cast<int>(x), kKnots - 2);
  return curve[j] + (x - j) * (curve[j + 1] - curve[j]);
}

// A pixel developed with one tile's parameters.
__device__ float3 develop_with(const TileParams& p, float3 c) {
  const float r = c.x * p.gain[0] * p.gain[3], g = c.y * p.gain[1] * p.gain[3];
  const float b = c.z * p.gain[2] * p.gain[3];
  float3 out;
  out.x = tone(p.curve, p.ccm[0][0] * r + p.ccm[0][1] * g + p.ccm[0][2] * b + p.ccm[0][3]);
  out.y = tone(p.curve, p.ccm[1][0] * r + p.ccm[1][1] * g + p.ccm[1][2] * b + p.ccm[1][3]);
  out.z = tone(p.curve, p.ccm[2][0] * r + p.ccm[2][1] * g + p.ccm[2][2] * b + p.ccm[2][3]);
  return out;
}

// A frame developed: each pixel with its four nearest tiles' parameters, their results blended
// by its place between their centres; the temporal average updated; the 8-bit frame written.
__global__ void develop(const uchar4* __restrict__ frame, const TileParams* __restrict__ params,
                        float4* __restrict__ average, uchar4* __restrict__ out) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (col >= kWidth || row >= kHeight) return;
  const float fx = (col + 0.5f) / kTile - 0.5f, fy = (row + 0.5f) / kTile - 0.5f;
  const int x0 = static_cast<int>(floorf(fx)), y0 = static_cast<int>(floorf(fy));
  const float wx = fx - x0, wy = fy - y0;
  const int xa = max(x0, 0), xb = min(x0 + 1, kTilesX - 1);
  const int ya = max(y0, 0), yb = min(y0 + 1, kTilesY - 1);
  const int i = row * kWidth + col;
  const uchar4 raw = frame[i];
  const float3 c = make_float3(raw.x / 255.0f, raw.y / 255.0f, raw.z / 255.0f);
  const float3 aa = develop_with(params[ya * kTilesX + xa], c);
  const float3 ab = develop_with(params[ya * kTilesX + xb], c);
  const float3 ba = develop_with(params[yb * kTilesX + xa], c);
  const float3 bb = develop_with(params[yb * kTilesX + xb], c);
  const float w00 = (1 - wx) * (1 - wy), w01 = wx * (1 - wy), w10 = (1 - wx) * wy, w11 = wx * wy;
  float4 a = average[i];
  a.x += kBlend * (w00 * aa.x + w01 * ab.x + w10 * ba.x + w11 * bb.x - a.x);
  a.y += kBlend * (w00 * aa.y + w01 * ab.y + w10 * ba.y + w11 * bb.y - a.y);
  a.z += kBlend * (w00 * aa.z + w01 * ab.z + w10 * ba.z + w11 * bb.z - a.z);
  average[i] = a;
  out[i] = make_uchar4(static_cast<unsigned char>(255.0f * fminf(a.x, 1.0f) + 0.5f),
                       static_cast<unsigned char>(255.0f * fminf(a.y, 1.0f) + 0.5f),
                       static_cast<unsigned char>(255.0f * fminf(a.z, 1.0f) + 0.5f), raw.w);
}

using corpus::next, corpus::noise, corpus::uniform;  // the random start (corpus.hpp)

// The 3A controller's parameters for tile k of frame i, from the tile's statistics in the
// clip's frame (its mean level and its light's colour temperature).
void tune(TileParams& p, const Tile& tile, int k, int i) {
  const int t = i % kPeriod;
  const std::uint64_t key = static_cast<std::uint64_t>(t) * kTiles + k;
  const double light = 2 * kPi * (static_cast<double>(t) / kPeriod + tile.phase);
  const double level = tile.scene * (1 + 0.5 * std::sin(light)) * (0.9 + 0.2 * noise(key));
  const double kelvin = 4500 + 1500 * std::cos(light + tile.tint) + 400 * (noise(~key) - 0.5);
  // grey world: the red and blue over green of a grey under that light, evened out
  p.gain[0] = float(std::pow(kelvin / 6500, 0.8)), p.gain[1] = 1.0f;
  p.gain[2] = float(std::pow(kelvin / 6500, -0.9));
  p.gain[3] = float(std::clamp(0.18 / level, 0.25, 8.0) * tile.shading);
  // saturation about the pixel's luma, less of it in the dark; a black-level offset
  const double saturation = 1.0 + 0.3 * std::min(level / 0.3, 1.0);
  const double luma[3] = {0.2126, 0.7152, 0.0722};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c)
      p.ccm[r][c] = float((1 - saturation) * luma[c] + (r == c ? saturation : 0.0));
    p.ccm[r][3] = float(-0.01 * noise(key * 3 + r + 1));
  }
  // a gamma for the tile's level, with a little S-curve for contrast
  const double gamma = 2.2 + 0.8 * (0.3 - std::min(level, 0.6)), contrast = 0.3 * noise(key + 7);
  for (int j = 0; j < kKnots; ++j) {
    const double y = std::pow(static_cast<double>(j) / (kKnots - 1), 1 / gamma);
    p.curve[j] = float(y + contrast * y * (1 - y) * (2 * y - 1));
  }
}

int main(int argc, char** argv) {
  const corpus::Options o = corpus::options(argc, argv, 5000);
  const int steps = o.steps;
  const bool fixed = o.fixed, resident = o.resident;
  std::vector<Tile> tiles(kTiles);
  for (int k = 0; k < kTiles; ++k) {
    const double dx = (k % kTilesX + 0.5) / kTilesX - 0.5, dy = (k / kTilesX + 0.5) / kTilesY - 0.5;
    tiles[k] = {uniform(0.05, 0.6), uniform(), uniform(0, 2 * kPi), 1 + 1.2 * (dx * dx + dy * dy)};
  }
  // the ring of frames, as the capture wrote them, and the temporal average's start
  std::vector<std::uint64_t> bytes(std::size_t(kRing) * kPixels / 2);
  for (std::uint64_t& b : bytes) b = next();
  std::vector<float4> average(kPixels);
  for (float4& a : average)
    a = make_float4(float(uniform()), float(uniform()), float(uniform()), 1);
  uchar4 *d_ring = nullptr, *d_out = nullptr;
  float4* d_average = nullptr;
  CHECK(cudaMalloc(&d_ring, std::size_t(kRing) * kPixels * sizeof(uchar4)));
  CHECK(cudaMalloc(&d_out, kPixels * sizeof(uchar4)));
  CHECK(cudaMalloc(&d_average, kPixels * sizeof(float4)));
  CHECK(cudaMemcpy(d_ring, bytes.data(), bytes.size() * sizeof(std::uint64_t), kH2D));
  CHECK(cudaMemcpy(d_average, average.data(), kPixels * sizeof(float4), kH2D));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  TileParams* staged = nullptr;  // the tiles' parameters as the host tunes them, pinned
  TileParams *d_params = nullptr, *d_clip = nullptr;
  CHECK(cudaMallocHost(&staged, kAllBytes));
  CHECK(cudaMalloc(&d_params, kAllBytes));
  if (resident) {  // the clip's every frame tuned, packed and uploaded once
    std::vector<TileParams> clip(std::size_t(kPeriod) * kTiles);
    for (int t = 0; t < kPeriod; ++t)
      for (int k = 0; k < kTiles; ++k) tune(clip[t * kTiles + k], tiles[k], k, t);
    CHECK(cudaMalloc(&d_clip, clip.size() * sizeof(TileParams)));
    CHECK(cudaMemcpy(d_clip, clip.data(), clip.size() * sizeof(TileParams), kH2D));
  }
  const dim3 threads(32, 8), blocks(kWidth / 32, kHeight / 8);
  auto step = [&](int i) {  // the tiles tuned and uploaded, the frame developed
    if (!resident) {
      for (int k = 0; k < kTiles; ++k) {
        tune(staged[k], tiles[k], k, i);
        if (fixed) continue;
        CHECK(cudaMemcpyAsync(d_params + k, staged + k, kTileBytes, kH2D, stream));  // STEP
      }
      if (fixed) CHECK(cudaMemcpyAsync(d_params, staged, kAllBytes, kH2D, stream));  // STEP
    }
    const TileParams* now = resident ? d_clip + (i % kPeriod) * kTiles : d_params;
    develop<<<blocks, threads, 0, stream>>>(d_ring + std::size_t(i % kRing) * kPixels, now,
                                            d_average, d_out);
    CHECK(cudaGetLastError());
    if (!resident) CHECK(cudaStreamSynchronize(stream));  // before the host rewrites `staged`
  };
  corpus::Loop loop;
  loop.run(step, kWarmup, steps);
  CHECK(cudaMemcpy(average.data(), d_average, kPixels * sizeof(float4), kD2H));
  double checksum = 0;
  for (const float4& a : average) checksum += double(a.x) + a.y + a.z;
  loop.report("cuda_tile_params_async", o, corpus::checksum(checksum));
  return 0;  // the host's and the device's memory freed with the process
}
