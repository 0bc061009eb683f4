// Tensor maps for sm_90's bulk copies: a persistent kernel's output, and operands' tiles.
//
// The output of a persistent kernel (gemm_wgmma, gemm_tiled) as a tensor map, for sm_90's bulk
// tensor copies out of shared memory: elements along a line of the output (a row, or a column when it is written
// column-major) as dimension 0, its lines as dimension 1, its matrices (batch, K slices) as
// dimension 2; boxes of 128 bytes along a line by a tile's lines, 128-byte swizzled. Built on the
// host for each launch; where the output's layout rules a map out (16-byte alignment of its start
// and strides), `valid` is false and the kernel's threads copy the tile out themselves (gemm_wgmma) or the
// dispatcher runs a tile that is not persistent (gemm_tiled).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace tiledmm {

struct TensorMap {
  CUtensorMap map;
  bool valid;
};

// The operands' maps of a kernel whose tiles come by bulk tensor copies (those it does not take
// that way are left invalid).
struct OperandMaps {
  TensorMap a, b;
};

// The driver's encoder, looked up once through the runtime (no link against libcuda); null
// where the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PFN_cuTensorMapEncodeTiled_v12000{};
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// Whether c, `matrices` matrices of `lines` lines of line_len elements of `size` bytes, contiguous,
// can have a map: coordinates are 32-bit; the start and strides multiples of 16 bytes, under 2^40.
inline bool output_map_fits(const void* c, int64_t line_len, int64_t lines, int64_t matrices, int64_t size) {
  const int64_t line_bytes = line_len * size, matrix_bytes = line_bytes * lines;
  return reinterpret_cast<uintptr_t>(c) % 16 == 0 && line_bytes % 16 == 0 && (matrices == 1 || matrix_bytes % 16 == 0) &&
         line_len <= INT32_MAX && lines <= INT32_MAX && matrices <= INT32_MAX && matrix_bytes < (int64_t(1) << 40);
}

// c: `matrices` matrices of `lines` lines of line_len elements, contiguous; boxes of box_lines
// lines by box_chunks 128-byte chunks of a line, 128-byte swizzled by the box's 128-byte rows
// (bulk_box_offset). One chunk: dimensions (element, line, matrix), the box clipped at the line's
// end. Several: dimensions (element of a chunk, chunk, line, matrix), so that a box writes
// box_chunks * 128 bytes of each line at once; the map then holds a line's whole chunks only (the
// box clips whole chunks), and the kernel writes the rest of the line itself. chunk_bytes 64:
// boxes of one 64-byte chunk in the 64-byte swizzle (tiles whose lines 128-byte chunks do not divide).
template <typename Out>
TensorMap make_output_map(Out* c, int64_t line_len, int64_t lines, int64_t matrices, int box_lines, int box_chunks = 1,
                          int chunk_bytes = 128) {
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "wgmma outputs: float32, float16, bfloat16");
  constexpr CUtensorMapDataType kType = std::is_same_v<Out, float>    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                        : std::is_same_v<Out, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                      : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr int64_t kSize = sizeof(Out);
  const int64_t chunk = chunk_bytes / kSize;
  TensorMap out{};
  const int64_t line_bytes = line_len * kSize, matrix_bytes = line_bytes * lines;
  const bool chunks_fit = box_chunks == 1 || (line_len >= chunk && chunk_bytes == 128);
  const auto encode = chunks_fit && output_map_fits(c, line_len, lines, matrices, kSize) ? tensor_map_encoder() : nullptr;
  if (!encode) return out;
  // A single matrix's stride, and the last dimension's of one, are never used: any multiple of 16 does.
  const cuuint64_t matrix_stride = (matrix_bytes + 15) / 16 * 16;
  const bool whole = box_chunks == 1;  // a box's chunks: one, or several of a line's whole chunks
  const cuuint64_t dims[4] = {cuuint64_t(whole ? line_len : chunk), cuuint64_t(whole ? lines : line_len / chunk),
                              cuuint64_t(whole ? matrices : lines), cuuint64_t(whole ? 1 : matrices)};
  const cuuint64_t strides[3] = {cuuint64_t(whole ? line_bytes : 128), whole ? matrix_stride : cuuint64_t(line_bytes),
                                 whole ? 16 : matrix_stride};
  const cuuint32_t box[4] = {cuuint32_t(chunk), cuuint32_t(whole ? box_lines : box_chunks),
                             cuuint32_t(whole ? 1 : box_lines), 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  out.valid = encode(&out.map, kType, 4, c, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     chunk_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  return out;
}

// An operand's matrices (float32, or 16-bit) as a tensor map, for bulk tensor copies of its tiles: `matrices`
// matrices (one where the batch broadcasts it: batch_stride 0) of `lines` lines of line_len
// elements, ld elements apart; boxes of box_lines lines of box_elems elements, zeros outside the
// tensor. `type` FLOAT32 copies the elements as they are; TFLOAT32 rounds each to nearest TF32
// (ties to even, as cvt.rn.tf32.f32) on the way (bench/NOTES.md item 112). `swizzle` NONE lands a
// box as dense lines; 128B in wgmma's 128-byte-swizzled layout (Swizzle128Tile, lines of 128
// bytes). Invalid where the start or a stride is not a multiple of 16 bytes, or a coordinate
// would pass 32 bits.
//   Users: gemm_tiled's row-major B (FLOAT32, unswizzled), TF32 wgmma's K-major B (TFLOAT32, 128B),
// and the residue-class maps below (A unswizzled, B 128B).
template <typename T>
TensorMap make_operand_map(const T* x, int64_t line_len, int64_t lines, int64_t matrices, int64_t ld,
                           int64_t batch_stride, int box_elems, int box_lines, CUtensorMapDataType type,
                           CUtensorMapSwizzle swizzle) {
  constexpr int64_t kSize = sizeof(T);
  TensorMap out{};
  if (batch_stride == 0) matrices = 1;
  const bool fits = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ld * kSize % 16 == 0 && batch_stride * kSize % 16 == 0 &&
                    line_len <= INT32_MAX && lines <= INT32_MAX && matrices <= INT32_MAX &&
                    ld * kSize < (int64_t(1) << 40) && batch_stride * kSize < (int64_t(1) << 40);
  const auto encode = fits ? tensor_map_encoder() : nullptr;
  if (!encode) return out;
  const cuuint64_t dims[3] = {cuuint64_t(line_len), cuuint64_t(lines), cuuint64_t(matrices)};
  // A single matrix's stride is never used: any multiple of 16 does.
  const cuuint64_t strides[2] = {cuuint64_t(ld * kSize), cuuint64_t(matrices == 1 ? 16 : batch_stride * kSize)};
  const cuuint32_t box[3] = {cuuint32_t(box_elems), cuuint32_t(box_lines), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  out.valid = encode(&out.map, type, 3, const_cast<T*>(x), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  return out;
}

// The residue-class maps of operands without 16-byte alignment, C classes of lines (C = 16 /
// the element's bytes: lines C apart share their misalignment). For each class c, the lines
// C j + c of A (a_lines lines of a_line_len elements, lda apart: k lines of m elements where A is
// MN-major, m lines of k where K-major) and of B (K-major: b_lines lines of k elements, ldb apart)
// are a tensor that starts shift[c] elements before line c, aligned down to 16 bytes, its lines
// C ld apart. Users: TF32 wgmma's every class in each tile (residue_class_loader.cuh: C = 4,
// TFLOAT32, rounded to TF32 on the way) and 16-bit wgmma's one class a tile
// (class_tile_loader.cuh: C = 8, one matrix).
template <int C>
struct ClassMaps {
  CUtensorMap a[C], b[C];
  int a_shift[C], b_shift[C];
  bool valid;
};
using ResidueClassMaps = ClassMaps<4>;
constexpr int kClassTileClasses = 8;
using ClassTileMaps = ClassMaps<kClassTileClasses>;

// Boxes of A's class c: a_box_lines[c] lines of a_box_elems elements, unswizzled; of B's:
// b_box_lines lines of b_box_elems, 128-byte swizzled. Invalid where a map does not fit (a class
// without lines, a batch stride that is not a multiple of 16 bytes, coordinates past 32 bits).
template <int C, typename T>
ClassMaps<C> make_class_maps(const T* a, int64_t lda, int64_t batch_stride_a, int64_t a_line_len, int64_t a_lines,
                             const T* b, int64_t ldb, int64_t batch_stride_b, int64_t b_lines, int64_t k,
                             int64_t batch, int a_box_elems, const int (&a_box_lines)[C], int b_box_elems,
                             int b_box_lines, CUtensorMapDataType type) {
  static_assert(C * sizeof(T) == 16, "lines C apart share their misalignment");
  ClassMaps<C> maps{};
  if (a_line_len < C || a_lines < C || b_lines < C || k < C) return maps;
  auto misalignment = [](const T* p) { return static_cast<int>(reinterpret_cast<uintptr_t>(p) % 16 / sizeof(T)); };
  maps.valid = true;
  if (batch == 1) batch_stride_a = batch_stride_b = 0;  // never used: any stride does
  for (int c = 0; c < C; ++c) {
    const T* a_line = a + c * lda;
    const T* b_line = b + c * ldb;
    maps.a_shift[c] = misalignment(a_line);
    maps.b_shift[c] = misalignment(b_line);
    const TensorMap am = make_operand_map(a_line - maps.a_shift[c], a_line_len + maps.a_shift[c],
                                          (a_lines - c + C - 1) / C, batch, C * lda, batch_stride_a, a_box_elems,
                                          a_box_lines[c], type, CU_TENSOR_MAP_SWIZZLE_NONE);
    const TensorMap bm = make_operand_map(b_line - maps.b_shift[c], k + maps.b_shift[c], (b_lines - c + C - 1) / C,
                                          batch, C * ldb, batch_stride_b, b_box_elems, b_box_lines, type,
                                          CU_TENSOR_MAP_SWIZZLE_128B);
    maps.a[c] = am.map;
    maps.b[c] = bm.map;
    maps.valid = maps.valid && am.valid && bm.valid;
  }
  return maps;
}

}  // namespace tiledmm
