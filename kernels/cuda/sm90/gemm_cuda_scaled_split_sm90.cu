// The 'highest' precision's short-K path on Hopper (scaled_split.cuh): the operands' scaled
// float16 splits, one float16 product on the persistent short-K wgmma tile whose epilogue scales
// the result back, and the exact recomputation of the lines left out of the split.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "cuda/dispatch/gemm_dispatch.cuh"
#include "cuda/sm90/scaled_split.cuh"

namespace tiledmm {

namespace {

using SplitFamily = WgmmaFamily<WgmmaHalfInput<__half, true>>;
using SplitTile = std::tuple_element_t<kShortK, SplitFamily::Tiles>;

constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// How an operand's lines are split: kSplitLanes threads a line where its elements lie along memory,
// written K-major (each line's segments together); else a thread a line, written MN-major
// (element k of every line together, lines padded to 8: 16-byte rows for the tensor maps). Either
// way the split's loads and stores are a group's neighbouring elements, and the product reads
// either layout.
struct SplitLayout {
  bool k_major;
  int64_t lines, kp, segments, ld, bytes;  // ld: the kernel's leading dimension of the split operand
  SplitLayout(const MatrixOperand& x, bool rows_of_a, int64_t lines_, int64_t kp_, int64_t segments_, int64_t batches)
      : k_major(rows_of_a == x.row_major),
        lines(lines_),
        kp(kp_),
        segments(segments_),
        ld(k_major ? segments * kp : round_up(lines, 8)),
        bytes(batches * segments * kp * round_up(lines, 8) * 2) {}
  int64_t batch_stride() const { return k_major ? lines * ld : segments * kp * ld; }
};

// The product's K, 3 kp, runs A' = [lo | hi | hi] by B' = [hi ; lo ; hi]. Where kp is a whole
// number of K tiles, each operand stores two segments and the product reads the big parts' again
// for its third K tile (GemmArgs::reread_k): the split writes a third less.
int64_t stored_segments(int64_t kp) { return kp % SplitTile::BK == 0 ? 2 : 3; }

// The workspace's parts, each 256-byte aligned: both operands' split lines, their scales (padded
// to whole tiles, as OutputScales reads them), the two counts and lists of lines left out.
struct SplitWorkspace {
  int64_t kp, segments, batches_a, batches_b, rows_padded, cols_padded;
  SplitLayout a_layout, b_layout;
  int64_t a_split, b_split, scales, counts, listed_rows, listed_cols, bytes;
  explicit SplitWorkspace(const GemmProblem& p)
      : kp(round_up(p.k, 8)),
        segments(stored_segments(kp)),
        batches_a(p.a.batch_stride == 0 ? 1 : p.batch),
        batches_b(p.b.batch_stride == 0 ? 1 : p.batch),
        rows_padded(round_up(p.m, SplitTile::BM)),
        cols_padded(round_up(p.n, SplitTile::BN)),
        a_layout(p.a, true, p.m, kp, segments, batches_a),
        b_layout(p.b, false, p.n, kp, segments, batches_b) {
    int64_t at = 0;
    auto take = [&](int64_t size) {
      const int64_t offset = at;
      at = round_up(at + size, 256);
      return offset;
    };
    a_split = take(a_layout.bytes);
    b_split = take(b_layout.bytes);
    scales = take((batches_a * rows_padded + batches_b * cols_padded) * 4);
    counts = take(2 * 4);
    listed_rows = take(batches_a * p.m * 8);
    listed_cols = take(batches_b * p.n * 8);
    bytes = at;
  }
  // Scales and counts, zeroed before the split (the padding's scales multiply outputs never stored).
  int64_t zeroed_begin() const { return scales; }
  int64_t zeroed_end() const { return listed_rows; }
};

// A's rows or B's columns, split into lines of their segments in the operand's own orientation (layout).
SplitLines split_lines_of(const MatrixOperand& x, bool rows_of_a, const GemmProblem& p, const SplitWorkspace& w,
                          unsigned char* base) {
  const SplitLayout& layout = rows_of_a ? w.a_layout : w.b_layout;
  // Element k of line l: A[l][k] (row-major: l * ld + k) or B[k][l] (row-major: k * ld + l).
  const bool k_unit = layout.k_major;
  float* scales = reinterpret_cast<float*>(base + w.scales);
  int* counts = reinterpret_cast<int*>(base + w.counts);
  return SplitLines{static_cast<const float*>(x.data),
                    x.batch_stride,
                    k_unit ? x.ld : 1,
                    k_unit ? 1 : x.ld,
                    rows_of_a ? w.batches_a : w.batches_b,
                    layout.lines,
                    p.k,
                    w.kp,
                    static_cast<int>(w.segments),
                    rows_of_a ? 0 : 1,
                    reinterpret_cast<__half*>(base + (rows_of_a ? w.a_split : w.b_split)),
                    layout.batch_stride(),
                    k_unit ? layout.ld : 1,
                    k_unit ? 1 : layout.ld,
                    rows_of_a ? scales : scales + w.batches_a * w.rows_padded,
                    rows_of_a ? w.rows_padded : w.cols_padded,
                    counts + (rows_of_a ? 0 : 1),
                    reinterpret_cast<int64_t*>(base + (rows_of_a ? w.listed_rows : w.listed_cols))};
}

// Blocks for a split's lines: enough for every SM's 2048 threads, striding over the rest.
int64_t split_blocks(const SplitLines& lines, bool k_major, const DeviceLimits& device) {
  const int64_t per_block = k_major ? kSplitThreads / kSplitLanes : kSplitThreads;
  return std::min<int64_t>((lines.batches * lines.lines + per_block - 1) / per_block, 16 * device.num_sms);
}

}  // namespace

template <>
void run_family<ScaledSplitPath>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device) {
  const SplitWorkspace w(p);
  torch::stable::Tensor workspace =
      torch::stable::empty({w.bytes}, torch::headeronly::ScalarType::Byte, std::nullopt,
                           torch::stable::Device(torch::headeronly::DeviceType::CUDA, p.device_index));
  unsigned char* base = static_cast<unsigned char*>(workspace.mutable_data_ptr());
  STD_CUDA_CHECK(cudaMemsetAsync(base + w.zeroed_begin(), 0, w.zeroed_end() - w.zeroed_begin(), stream));

  const SplitLines a_lines = split_lines_of(p.a, true, p, w, base);
  const SplitLines b_lines = split_lines_of(p.b, false, p, w, base);
  const int64_t a_blocks = split_blocks(a_lines, w.a_layout.k_major, device);
  const int64_t blocks = a_blocks + split_blocks(b_lines, w.b_layout.k_major, device);
  with_bool(w.a_layout.k_major, [&](auto a_along) {
    with_bool(w.b_layout.k_major, [&](auto b_along) {
      split_lines_kernel<kMaxScaledSplitK, decltype(a_along)::value, decltype(b_along)::value>
          <<<static_cast<unsigned>(blocks), kSplitThreads, 0, stream>>>(a_lines, b_lines, a_blocks);
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });

  // C = A' B' (in the layouts the split wrote), scaled back in the epilogue.
  const int64_t k3 = 3 * w.kp;
  GemmArgs<__half, float> args{a_lines.dst, b_lines.dst, static_cast<float*>(p.c), w.a_layout.ld, w.b_layout.ld,
                               w.batches_a == 1 ? 0 : w.a_layout.batch_stride(),
                               w.batches_b == 1 ? 0 : w.b_layout.batch_stride(), p.batch, p.m, p.n, k3, 1,
                               round_up(k3, SplitTile::BK)};
  args.reread_k = w.segments == 2 ? w.kp : 0;
  args.row_scale = a_lines.scales;
  args.col_scale = b_lines.scales;
  args.row_scale_stride = w.batches_a == 1 ? 0 : w.rows_padded;
  args.col_scale_stride = w.batches_b == 1 ? 0 : w.cols_padded;
  with_bool(w.a_layout.k_major, [&](auto a_row) {
    with_bool(!w.b_layout.k_major, [&](auto b_row) {
      SplitFamily::launch<SplitTile, float, true, decltype(a_row)::value, decltype(b_row)::value, false>(args, device,
                                                                                                      stream);
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });

  // The lines left out: their outputs recomputed exactly, rows and columns in one launch (a grid
  // that strides over however many the split listed).
  const ExactLines exact{static_cast<const float*>(p.a.data),
                         static_cast<const float*>(p.b.data),
                         static_cast<float*>(p.c),
                         p.a.ld,
                         p.b.ld,
                         p.a.batch_stride,
                         p.b.batch_stride,
                         p.batch,
                         p.m,
                         p.n,
                         p.k,
                         reinterpret_cast<const int*>(base + w.counts),
                         {reinterpret_cast<const int64_t*>(base + w.listed_rows),
                          reinterpret_cast<const int64_t*>(base + w.listed_cols)}};
  // Launched behind the product (programmatic dependent launch): its blocks start as the product's
  // finish, and wait for the product (whose outputs of those lines they overwrite) before any access.
  with_bool(p.a.row_major, [&](auto a_row) {
    with_bool(p.b.row_major, [&](auto b_row) {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(static_cast<unsigned>(8 * device.num_sms), 2);  // y: rows, columns
      config.blockDim = dim3(128);
      config.stream = stream;
      cudaLaunchAttribute behind = behind_last_grid();
      config.attrs = &behind;
      config.numAttrs = 1;
      STD_CUDA_CHECK(cudaLaunchKernelEx(
          &config, exact_lines_kernel<kMaxScaledSplitK, decltype(a_row)::value, decltype(b_row)::value>, exact));
    });
  });
}

template <>
std::string describe_family<ScaledSplitPath>(const GemmProblem& p, const DeviceLimits& device) {
  const SplitWorkspace w(p);
  const std::string along = std::to_string(kSplitLanes) + " threads";
  std::ostringstream s;
  s << "kernel: " << SplitFamily::kName << ", on float16 splits of the float32 operands\n"
    << "split: each row of A and column of B scaled by a power of two (its largest magnitude into [2^"
    << kSplitTop << ", 2^" << kSplitTop + 1
    << ")) and split into a float16 big part and a float16 remainder; A' = [remainder | big | big], B' = [big ; "
       "remainder ; big], each K = "
    << p.k << " padded to " << w.kp
    << (w.segments == 2 ? " (each stores its big part once: the product's third K tile reads it again)" : "")
    << "; A' "
    << (w.a_layout.k_major ? "K-major (" + along + " a row)" : std::string("MN-major (a thread a row)")) << ", B' "
    << (w.b_layout.k_major ? "K-major (" + along + " a column)" : std::string("MN-major (a thread a column)")) << "\n"
    << "tile " << kShortK << ": ";
  GemmProblem q = p;
  q.dtype = torch::headeronly::ScalarType::Half;
  q.k = 3 * w.kp;
  q.a = MatrixOperand{nullptr, w.a_layout.ld, 0, w.a_layout.k_major};
  q.b = MatrixOperand{nullptr, w.b_layout.ld, 0, !w.b_layout.k_major};
  SplitFamily::describe_layout<SplitTile, true>(s, q);
  s << "; both operands' tiles by bulk tensor copies (TMA), counted on each stage's mbarrier; each output scaled "
       "back by its row's and column's powers of two in the epilogue\n"
    << "exact: rows and columns left out of the split (a non-finite value, a scale past 2^+-" << kMaxSplitScaleExp
    << ", or a nonzero value more than 2^" << kSplitRange
    << " below the line's largest) are recomputed with exact float32 fused multiply-adds by a second kernel\n"
    << "workspace: " << w.bytes << " bytes\n"
    << "why: float16 has TF32's 11 significant bits at twice its tensor-core rate, so the split's three products "
       "take 1.5 TF32 products' time, where the output's writes weigh as much as the products ("
    << device.num_sms << " SMs)";
  return s.str();
}

}  // namespace tiledmm
