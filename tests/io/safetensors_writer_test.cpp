// The streaming safetensors writer: what it writes is read back by SafetensorsFile with the same
// names, dtypes, shapes and bytes whatever the pieces the data arrives in; the header is padded to
// 8 bytes; writing too much or too little is an error naming the file.
#include "io/safetensors_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using core::DType;

TEST(SafetensorsWriter, StreamedPiecesReadBackExactly) {
  const fs::path dir = test::make_temp_dir("tessera-stwriter");
  const std::vector<io::TensorSpec> specs = {{"a.weight", DType::kBF16, {3, 5}},
                                             {"b.scale", DType::kF32, {}},
                                             {"c.packed", DType::kU8, {7, 3}},
                                             {"d.fp8", DType::kF8E4M3, {2, 2}},
                                             {"e.empty", DType::kF32, {0, 4}}};
  EXPECT_EQ(specs[0].nbytes(), 30u);
  EXPECT_EQ(specs[1].nbytes(), 4u);
  std::string data;
  for (int i = 0; i < 30 + 4 + 21 + 4; ++i) data.push_back(static_cast<char>(i * 37 + 1));
  {
    io::SafetensorsStreamWriter w(dir / "x.safetensors", specs, {{"format", "pt"}});
    EXPECT_EQ(w.data_bytes(), data.size());
    // Pieces that straddle tensor boundaries.
    for (size_t a = 0; a < data.size(); a += 11) w.write(data.data() + a, std::min<size_t>(11, data.size() - a));
    w.close();
  }
  const std::string file = test::read_file(dir / "x.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(file.size(), 8 + n + data.size());
  EXPECT_EQ(file.substr(8, 1), "{");

  const auto st = io::SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(st->metadata().at("format"), "pt");
  ASSERT_EQ(st->tensors().size(), specs.size());
  uint64_t offset = 0;
  for (const auto& s : specs) {
    SCOPED_TRACE(s.name);
    const auto& info = st->info(s.name);
    EXPECT_EQ(info.dtype, s.dtype);
    EXPECT_EQ(info.shape, s.shape);
    EXPECT_EQ(info.begin, offset);
    const core::Tensor t = st->tensor(s.name);
    EXPECT_EQ(std::string(static_cast<const char*>(t.raw()), t.nbytes()), data.substr(offset, s.nbytes()));
    offset += s.nbytes();
  }
  fs::remove_all(dir);
}

TEST(SafetensorsWriter, TooMuchOrTooLittleDataIsAnError) {
  const fs::path dir = test::make_temp_dir("tessera-stwriter");
  const std::vector<io::TensorSpec> specs = {{"t", DType::kF32, {2}}};
  const std::string eight(8, 'x');
  {
    io::SafetensorsStreamWriter w(dir / "over.safetensors", specs, {});
    w.write(eight.data(), 6);
    EXPECT_THROW(w.write(eight.data(), 3), core::Error);
  }
  {
    io::SafetensorsStreamWriter w(dir / "short.safetensors", specs, {});
    w.write(eight.data(), 7);
    try {
      w.close();
      ADD_FAILURE() << "close() after 7 of 8 bytes succeeded";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("short.safetensors"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(io::safetensors_header({{"t", DType::kF32, {1}}, {"t", DType::kF32, {1}}}, {}), core::Error);
  EXPECT_THROW(io::SafetensorsStreamWriter(dir / "no-such-dir" / "x.safetensors", specs, {}), core::Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
