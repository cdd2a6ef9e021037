// GGUF loading: the reader's validation (every broken file is a ModelError naming the problem),
// the llama config from metadata, the weights under Hugging Face names with llama.cpp's q/k row
// permutation undone (checked against the safetensors copy of the same model), and the real
// SmolLM2-135M-Instruct Q4_1 file.
#include <cmath>
#include <cstdlib>
#include <random>
#include <tuple>

#include "check.h"
#include "cpu_kernels.h"
#include "gguf_writer.h"
#include "model_files.h"
#include "quant_kernels.h"
#include "strata/cpu_backend.h"
#include "strata/float_convert.h"
#include "strata/gguf.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_source.h"

using namespace strata;
using strata_test::GgufWriter;
using strata_test::TempDir;

namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8;

// Random blocks of a quantized type with small, valid fp16 scales.
std::string random_blocks(uint32_t type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t block = type == kQ8_0 ? 34 : type == kQ4_0 ? 18 : 20;
  std::string out(static_cast<size_t>(rows * cols / 32 * block), '\0');
  for (char& c : out) c = static_cast<char>(rng());
  for (size_t at = 0; at < out.size(); at += block) {
    const uint16_t d = f32_to_f16(0.01f + 0.001f * static_cast<float>(rng() % 10));
    std::memcpy(&out[at], &d, 2);
    if (type == kQ4_1) {
      const uint16_t m = f32_to_f16(-0.05f);
      std::memcpy(&out[at + 2], &m, 2);
    }
  }
  return out;
}

std::string f32_values(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

// A valid 1-layer llama: hidden 32, ffn 64, 2 heads of 16, 1 kv head, vocab 8, with every
// supported tensor type somewhere. attn_q is F32 with value = its row index, to see rows move.
// `all_q4_0`: q, k and v all Q4_0 instead (so they stay one quantized matrix) and an untied
// Q4_0 output projection.
GgufWriter tiny_model(bool all_q4_0 = false) {
  std::mt19937 rng(7);
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.embedding_length", 32);
  w.u32("llama.feed_forward_length", 64);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.u32("llama.context_length", 64);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.f32("llama.rope.freq_base", 10000.0f);
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  w.u32("tokenizer.ggml.eot_token_id", 3);
  w.strings("tokenizer.ggml.tokens", {"a", "<s>", "</s>", "<eot>", "e", "f", "g", "h"});
  std::vector<float> norm(32, 1.0f), q(32 * 32);
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) q[r * 32 + c] = static_cast<float>(r);
  std::string f16_o;
  for (int i = 0; i < 32 * 32; ++i) {
    const uint16_t h = f32_to_f16(0.01f * static_cast<float>(i % 7 - 3));
    f16_o.append(reinterpret_cast<const char*>(&h), 2);
  }
  w.tensor({"token_embd.weight", {32, 8}, kQ8_0, random_blocks(kQ8_0, 8, 32, rng)});
  w.tensor({"output_norm.weight", {32}, kF32, f32_values(norm)});
  w.tensor({"blk.0.attn_norm.weight", {32}, kF32, f32_values(norm)});
  if (all_q4_0) {
    w.tensor({"output.weight", {32, 8}, kQ4_0, random_blocks(kQ4_0, 8, 32, rng)});
    w.tensor({"blk.0.attn_q.weight", {32, 32}, kQ4_0, random_blocks(kQ4_0, 32, 32, rng)});
    w.tensor({"blk.0.attn_k.weight", {32, 16}, kQ4_0, random_blocks(kQ4_0, 16, 32, rng)});
  } else {
    w.tensor({"blk.0.attn_q.weight", {32, 32}, kF32, f32_values(q)});
    w.tensor({"blk.0.attn_k.weight", {32, 16}, kQ4_1, random_blocks(kQ4_1, 16, 32, rng)});
  }
  w.tensor({"blk.0.attn_v.weight", {32, 16}, kQ4_0, random_blocks(kQ4_0, 16, 32, rng)});
  w.tensor({"blk.0.attn_output.weight", {32, 32}, kF16, f16_o});
  w.tensor({"blk.0.ffn_norm.weight", {32}, kF32, f32_values(norm)});
  w.tensor({"blk.0.ffn_gate.weight", {32, 64}, kQ4_1, random_blocks(kQ4_1, 64, 32, rng)});
  w.tensor({"blk.0.ffn_up.weight", {32, 64}, kQ4_1, random_blocks(kQ4_1, 64, 32, rng)});
  w.tensor({"blk.0.ffn_down.weight", {64, 32}, kQ4_1, random_blocks(kQ4_1, 32, 64, rng)});
  return w;
}

std::filesystem::path write(const TempDir& dir, const std::string& bytes, const std::string& name = "model.gguf") {
  const std::filesystem::path path = dir.path() / name;
  strata_test::write_file(path, bytes);
  return path;
}

// Loads config and weights; returns the ModelError's code and message ("" when it loads).
std::pair<std::string, std::string> load_error(const std::filesystem::path& path) {
  try {
    GgufFile file = GgufFile::open(path);
    ModelConfig config = gguf_model_config(file);
    load_gguf_weights(file, config);
  } catch (const ModelError& e) {
    return {e.code(), e.what()};
  }
  return {"", ""};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define CHECK_LOAD_ERROR(bytes, code, part)                                      \
  do {                                                                          \
    TempDir _dir("gguf");                                                       \
    auto [_code, _message] = load_error(write(_dir, bytes));                    \
    if (_code != (code) || !contains(_message, part)) std::printf("  %s: %s\n", _code.c_str(), _message.c_str()); \
    CHECK(_code == (code));                                                     \
    CHECK(contains(_message, part));                                            \
  } while (0)

}  // namespace

TEST_CASE("gguf: a valid file gives the config, fp32 and quantized weights") {
  TempDir dir("gguf");
  GgufFile file = GgufFile::open(write(dir, tiny_model().build()));
  CHECK_EQ(file.version(), 3u);
  const ModelConfig c = gguf_model_config(file);
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK_EQ(c.num_layers, 1);
  CHECK_EQ(c.hidden_size, 32);
  CHECK_EQ(c.intermediate_size, 64);
  CHECK_EQ(c.num_heads, 2);
  CHECK_EQ(c.num_kv_heads, 1);
  CHECK_EQ(c.head_dim, 16);
  CHECK_EQ(c.vocab_size, 8);
  CHECK_EQ(c.max_position_embeddings, 64);
  CHECK(c.tie_word_embeddings);
  CHECK_EQ(c.bos_token_id, 1);
  CHECK(c.eos_token_ids == std::vector<int32_t>({2, 3}));  // eos, then eot
  ModelWeights w = load_gguf_weights(file, c);
  CHECK_EQ(w.quantized.size(), size_t{6});  // embed, k, v, gate, up, down
  CHECK(w.quantized.at("model.embed_tokens.weight").type == QuantType::Q8_0);
  CHECK(w.quantized.at("model.layers.0.self_attn.v_proj.weight").type == QuantType::Q4_0);
  CHECK(w.quantized.at("model.layers.0.mlp.down_proj.weight").rows == 32);
  CHECK(w.quantized.at("model.layers.0.mlp.down_proj.weight").cols == 64);
  CHECK_EQ(w.layers[0].o_proj.size(), size_t{32 * 32});  // F16 widened
  CHECK_NEAR(w.layers[0].o_proj[1], 0.01f * -2, 1e-5);
  CHECK(w.layers[0].k_proj.empty());  // kept quantized
}

TEST_CASE("gguf: q and k rows are put back in Hugging Face order, quantized or not") {
  TempDir dir("gguf");
  GgufWriter writer = tiny_model();
  const std::filesystem::path path = write(dir, writer.build());
  GgufFile file = GgufFile::open(path);
  ModelWeights w = load_gguf_weights(file, gguf_model_config(file));
  // HF row h*16 + j*8 + i comes from GGUF row h*16 + 2i + j.
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 8; ++i) CHECK_EQ(w.layers[0].q_proj[(h * 16 + j * 8 + i) * 32], static_cast<float>(h * 16 + 2 * i + j));
  const QuantMatrix& k = w.quantized.at("model.layers.0.self_attn.k_proj.weight");
  const std::string& gguf_k = writer.tensors()[4].bytes;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 8; ++i) CHECK(std::memcmp(k.row(j * 8 + i), gguf_k.data() + (2 * i + j) * 20, 20) == 0);
}

TEST_CASE("gguf: map_gguf_weights leaves the matrices in the file, in the same rows load_gguf_weights copies") {
  TempDir dir("gguf");
  GgufFile file = GgufFile::open(write(dir, tiny_model().build()));
  const ModelConfig c = gguf_model_config(file);
  const ModelWeights copied = load_gguf_weights(file, c);
  const GgufWeights mapped = map_gguf_weights(file, c);
  CHECK(mapped.dense.quantized.empty());
  CHECK_EQ(mapped.blocks.size(), copied.quantized.size());
  const uint8_t* begin = file.tensors().front().data;
  const uint8_t* end = file.tensors().back().data + file.tensors().back().nbytes;
  // The float matrices: o_proj F16, q_proj F32 with its rows permuted in the file. Their members
  // stay empty; the norms are read.
  CHECK_EQ(mapped.matrices.size(), size_t{2});
  CHECK(mapped.dense.layers[0].o_proj.empty() && mapped.dense.layers[0].q_proj.empty());
  CHECK(mapped.dense.layers[0].input_norm == copied.layers[0].input_norm && !copied.layers[0].input_norm.empty());
  for (const auto& [name, want, dtype, permuted] :
       {std::tuple{"model.layers.0.self_attn.o_proj.weight", &copied.layers[0].o_proj, DenseMatrixRef::Dtype::kF16, false},
        std::tuple{"model.layers.0.self_attn.q_proj.weight", &copied.layers[0].q_proj, DenseMatrixRef::Dtype::kF32, true}}) {
    const DenseMatrixRef& m = mapped.matrices.at(name);
    CHECK(m.dtype == dtype && m.rows == 32 && m.cols == 32);
    CHECK(m.data >= begin && m.data < end);  // not a copy
    CHECK(m.gguf_tensor != nullptr && m.gguf_tensor->data == m.data && m.tensor == nullptr);
    CHECK(m.file_rows.empty() == !permuted);
    std::vector<float> values(32 * 32, NAN);
    m.rows_to_f32(0, m.rows, values.data());
    CHECK(values == *want);  // F16 widened exactly; q's rows in the Hugging Face order
  }
  // q's value is its file row: the Hugging Face row 1 is the file's row 2 (interleaved pairs).
  CHECK(copied.layers[0].q_proj[1 * 32] == 2.0f && copied.layers[0].q_proj[8 * 32] == 1.0f);
  for (const auto& [name, m] : copied.quantized) {
    const GgufBlocks& b = mapped.blocks.at(name);
    CHECK(b.type == m.type);
    CHECK(b.rows == m.rows && b.cols == m.cols && b.row_bytes() == m.row_bytes());
    CHECK(b.data >= begin && b.data < end);  // not a copy
    CHECK(b.tensor != nullptr && b.tensor->data == b.data);
    // q and k (the Q4_1 k here) carry their row order; the rest read in the file's order.
    CHECK(b.file_rows.empty() == (name.find("k_proj") == std::string::npos));
    bool rows_same = true;
    for (int64_t r = 0; r < m.rows; ++r) rows_same = rows_same && std::memcmp(b.row(r), m.row(r), size_t(m.row_bytes())) == 0;
    CHECK(rows_same);
    const QuantMatrix again = copy_blocks(b);
    CHECK(std::memcmp(again.data.data(), m.data.data(), size_t(m.rows * m.row_bytes())) == 0);
  }
}

TEST_CASE("gguf: the CPU backend runs a file that mixes F32, F16, Q8_0, Q4_0 and Q4_1") {
  TempDir dir("gguf");
  CpuBackend backend(write(dir, tiny_model().build()), {1});
  CHECK(backend.weights_format() == "Q4_0 + Q4_1 + Q8_0");
  CHECK(backend.kv_cache_dtype() == "float16");  // quantized matrices: an f16 cache, as llama.cpp's
  CHECK(CpuBackend(write(dir, tiny_model().build(), "b.gguf"), {1, CpuKvDtype::kFloat32}).kv_cache_dtype() ==
        "float32");
  // The load log's kernels name the quantized set too.
  CHECK(backend.kernel_isa() == std::string(cpu_kernels().isa) + ", quantized: " + quant_kernels().isa);
  backend.allocate_kv(4, 16);
  const std::vector<int32_t> tokens = {1, 4, 5, 6}, table = {0};
  StepBatch batch;
  batch.seqs.push_back({tokens.data(), 4, 0, table.data(), 1, true});
  std::vector<float> logits(8, NAN);
  backend.forward(batch, logits.data());
  for (float v : logits) CHECK(std::isfinite(v));
}

TEST_CASE("gguf: the CPU backend packs a file's blocks from its mapping as it would their copies") {
  // The backend packs the quantized matrices into its panels straight from the file's mapping
  // (q and k in the Hugging Face row order, q, k and v fused); from the weights copied out
  // by load_gguf_weights it packs the same rows. Same panels, so the same logits bit for bit.
  // The mixed file widens q, k (permuted) and v to fp32; the Q4_0 one fuses them quantized and
  // keeps an untied embedding's blocks for the gather.
  for (bool all_q4_0 : {false, true}) {
    TempDir dir("gguf");
    const std::filesystem::path path = write(dir, tiny_model(all_q4_0).build());
    int64_t progress[2] = {-1, -1};
    CpuBackend mapped(path, {1, CpuKvDtype::kAuto, LoadProgress(progress)});
    CHECK(progress[1] == gguf_tensor_bytes(GgufFile::open(path)) && progress[0] == progress[1]);
    const GgufFile file = GgufFile::open(path);
    const ModelConfig config = gguf_model_config(file);
    CHECK(config.tie_word_embeddings == !all_q4_0);
    CpuBackend copied(config, load_gguf_weights(file, config), {1});
    CHECK(mapped.weights_format() == copied.weights_format());
    const std::vector<int32_t> tokens = {1, 4, 5, 6, 7, 3}, table = {0};
    StepBatch batch;
    batch.seqs.push_back({tokens.data(), 6, 0, table.data(), 1, true});
    std::vector<std::vector<float>> logits;
    for (CpuBackend* b : {&mapped, &copied}) {
      b->allocate_kv(4, 16);
      logits.emplace_back(8, NAN);
      b->forward(batch, logits.back().data());
    }
    for (float v : logits[0]) CHECK(std::isfinite(v));
    CHECK(std::memcmp(logits[0].data(), logits[1].data(), 8 * sizeof(float)) == 0);
  }
}

TEST_CASE("gguf: broken files are clear errors") {
  const std::string good = tiny_model().build();
  CHECK_LOAD_ERROR(good.substr(0, 2), model_error_code::kWeights, "truncated");
  CHECK_LOAD_ERROR(good.substr(0, 20), model_error_code::kWeights, "truncated");
  CHECK_LOAD_ERROR(good.substr(0, 100), model_error_code::kWeights, "truncated");                            // metadata
  CHECK_LOAD_ERROR(good.substr(0, tiny_model().metadata_end() + 30), model_error_code::kWeights, "truncated");  // tensor infos
  CHECK_LOAD_ERROR(good.substr(0, good.size() - 40), model_error_code::kWeights, "truncated");                 // data
  CHECK_LOAD_ERROR(tiny_model().build(3, "GGML"), model_error_code::kWeights, "not a GGUF file");
  CHECK_LOAD_ERROR(tiny_model().build(1), model_error_code::kWeights, "version 1");
  std::string huge = good;
  const uint64_t length = uint64_t{1} << 40;
  std::memcpy(&huge[24], &length, 8);  // the first key's length
  CHECK_LOAD_ERROR(huge, model_error_code::kWeights, "claims");
  std::string corrupt_count = good;
  const uint64_t count = uint64_t{1} << 50;
  std::memcpy(&corrupt_count[16], &count, 8);  // metadata count
  CHECK_LOAD_ERROR(corrupt_count, model_error_code::kWeights, "corrupt");
}

TEST_CASE("gguf: unsupported tensor types and architectures name themselves") {
  GgufWriter k_quant = tiny_model();
  k_quant.tensors()[4].type = 12;  // Q4_K
  CHECK_LOAD_ERROR(k_quant.build(), model_error_code::kWeights, "has type Q4_K; Strata loads F32, F16, BF16, Q8_0, Q4_0 and Q4_1");
  CHECK_LOAD_ERROR(k_quant.build(), model_error_code::kWeights, "blk.0.attn_k.weight");
  GgufWriter unknown = tiny_model();
  unknown.tensors()[4].type = 99;
  CHECK_LOAD_ERROR(unknown.build(), model_error_code::kWeights, "unknown ggml type id 99");
  GgufWriter gpt2;
  gpt2.str("general.architecture", "gpt2");
  CHECK_LOAD_ERROR(gpt2.build(), model_error_code::kUnknownArchitecture, "\"gpt2\" is not supported");
}

TEST_CASE("gguf: missing or mistyped metadata and tensors are config or weight errors") {
  GgufWriter no_layers;
  no_layers.str("general.architecture", "llama");
  CHECK_LOAD_ERROR(no_layers.build(), model_error_code::kConfig, "\"llama.block_count\" is missing");
  GgufWriter typed;
  typed.str("general.architecture", "llama");
  typed.str("llama.block_count", "one");
  CHECK_LOAD_ERROR(typed.build(), model_error_code::kConfig, "is a string, expected an integer");
  GgufWriter missing = tiny_model();
  missing.tensors().erase(missing.tensors().begin() + 9);  // ffn_up
  CHECK_LOAD_ERROR(missing.build(), model_error_code::kWeights, "missing tensor \"blk.0.ffn_up.weight\"");
  GgufWriter shape = tiny_model();
  shape.tensors()[5].dims = {32, 8};
  shape.tensors()[5].bytes.resize(8 * 18);
  CHECK_LOAD_ERROR(shape.build(), model_error_code::kWeights, "has shape [8, 32], expected [16, 32]");
  GgufWriter extra = tiny_model();
  extra.tensor({"blk.1.attn_q.weight", {32}, kF32, std::string(128, '\0')});
  CHECK_LOAD_ERROR(extra.build(), model_error_code::kWeights, "is not part of the model");
}

TEST_CASE("model source: a file, a directory with one .gguf, a Hugging Face directory") {
  TempDir dir("gguf-source");
  const std::string good = tiny_model().build();
  const auto one = write(dir, good, "a.gguf");
  CHECK(resolve_model_source(one).kind == ModelSource::Kind::kGguf);
  CHECK(resolve_model_source(dir.path()).path == one);
  write(dir, good, "b.gguf");
  try {
    resolve_model_source(dir.path());
    CHECK(false);
  } catch (const ModelError& e) {
    CHECK(contains(e.what(), "holds 2 .gguf files (a.gguf, b.gguf)"));
  }
  const auto text = write(dir, "hello", "notes.txt");
  CHECK_THROWS(resolve_model_source(text));
  CHECK_THROWS(resolve_model_source(dir.path() / "missing"));
  strata_test::write_file(dir.path() / "config.json", "{}");
  CHECK(resolve_model_source(dir.path()).kind == ModelSource::Kind::kHuggingFace);
}

TEST_CASE("gguf: tinystories-656k's GGUF equals its safetensors after the q/k un-permutation") {
  const char* models = std::getenv("STRATA_MODELS_DIR");
  if (models == nullptr) return strata_test::skip("tinystories-656k-gguf not found (STRATA_MODELS_DIR unset)");
  const std::filesystem::path root(models);
  GgufFile file = GgufFile::open(root / "tinystories-656k-gguf" / "tinystories-656k-f32.gguf");
  const ModelConfig gc = gguf_model_config(file);
  const ModelConfig hc = load_model_config(root / "tinystories-656k");
  CHECK_EQ(gc.num_layers, hc.num_layers);
  CHECK_EQ(gc.num_kv_heads, hc.num_kv_heads);
  CHECK_EQ(gc.vocab_size, hc.vocab_size);
  CHECK_EQ(gc.tie_word_embeddings, hc.tie_word_embeddings);
  ModelWeights g = load_gguf_weights(file, gc);
  ModelWeights h = load_model_weights(root / "tinystories-656k", hc);
  CHECK(g.embed_tokens == h.embed_tokens);
  CHECK(g.final_norm == h.final_norm);
  for (int32_t l = 0; l < hc.num_layers; ++l) {
    const LayerWeights &a = g.layers[l], &b = h.layers[l];
    CHECK(a.q_proj == b.q_proj);
    CHECK(a.k_proj == b.k_proj);
    CHECK(a.v_proj == b.v_proj);
    CHECK(a.o_proj == b.o_proj);
    CHECK(a.gate_proj == b.gate_proj && a.up_proj == b.up_proj && a.down_proj == b.down_proj);
    CHECK(a.input_norm == b.input_norm && a.post_attention_norm == b.post_attention_norm);
  }
}

TEST_CASE("gguf: SmolLM2-135M-Instruct Q4_1") {
  const char* path = std::getenv("STRATA_SMOLLM2_GGUF");
  if (path == nullptr) return strata_test::skip("SmolLM2-135M-Instruct GGUF not found (STRATA_SMOLLM2_GGUF unset)");
  GgufFile file = GgufFile::open(path);
  const ModelConfig c = gguf_model_config(file);
  CHECK_EQ(c.num_layers, 30);
  CHECK_EQ(c.hidden_size, 576);
  CHECK_EQ(c.num_heads, 9);
  CHECK_EQ(c.num_kv_heads, 3);
  CHECK_EQ(c.head_dim, 64);
  CHECK_EQ(c.intermediate_size, 1536);
  CHECK_NEAR(c.rope_theta, 100000.0, 0.0);
  CHECK_EQ(c.max_position_embeddings, 8192);
  CHECK_EQ(c.vocab_size, 49152);
  CHECK(c.tie_word_embeddings);
  CHECK_EQ(c.bos_token_id, 1);
  CHECK(!c.eos_token_ids.empty() && c.eos_token_ids[0] == 2);
  ModelWeights w = load_gguf_weights(file, c);
  int q4_1 = 0;
  for (const auto& [name, m] : w.quantized) q4_1 += m.type == QuantType::Q4_1;
  CHECK_EQ(q4_1, 210);
  CHECK(w.quantized.at("model.embed_tokens.weight").type == QuantType::Q8_0);
  CHECK_EQ(w.quantized.size(), size_t{211});
}

TEST_MAIN()
