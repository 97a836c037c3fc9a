// The loader's staged reader: every range's bytes exactly as in the file, in order, through a ring
// smaller than the ranges together (so it wraps), with ranges held and released out of order; read
// errors named with the file.
#include "io/staged_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/tessera_staged_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string random_file(const fs::path& p, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(bytes, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  std::ofstream(p, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

StagedReader::Alloc heap() {
  return [](size_t n) { return std::shared_ptr<void>(::operator new(n), [](void* q) { ::operator delete(q); }); };
}

TEST(StagedReader, ReadsEveryRangeExactlyThroughAWrappingRing) {
  TempDir dir;
  const std::string a = random_file(dir.path / "a.bin", 300'000, 1);
  const std::string b = random_file(dir.path / "b.bin", 200'000, 2);
  std::vector<FileRange> ranges;
  std::vector<std::string> expect;
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const bool in_a = rng() % 2 == 0;
    const std::string& src = in_a ? a : b;
    const uint64_t bytes = i % 17 == 0 ? 0 : rng() % 9000;  // some empty ranges
    const uint64_t offset = rng() % (src.size() - bytes);
    ranges.push_back({dir.path / (in_a ? "a.bin" : "b.bin"), offset, bytes});
    expect.push_back(src.substr(offset, bytes));
  }
  // A 40 KB ring (twice the largest pair held at once), 1000-byte reads: wraps many times.
  StagedReader reader(ranges, heap(), 40'000, 4, 1000);
  for (size_t i = 0; i < ranges.size(); i += 2) {
    // Hold two ranges at once and release the second first, as a linear's weight and scale are.
    const auto* first = static_cast<const char*>(reader.take(i));
    ASSERT_EQ(std::string(first, ranges[i].bytes), expect[i]) << "range " << i;
    if (i + 1 < ranges.size()) {
      const auto* second = static_cast<const char*>(reader.take(i + 1));
      EXPECT_EQ(std::string(first, ranges[i].bytes), expect[i]) << "range " << i << " overwritten";
      ASSERT_EQ(std::string(second, ranges[i + 1].bytes), expect[i + 1]) << "range " << i + 1;
      reader.release(i + 1);
    }
    reader.release(i);
  }
}

TEST(StagedReader, ARangeLargerThanTheArenaGetsAnArenaOfItsSize) {
  TempDir dir;
  const std::string a = random_file(dir.path / "a.bin", 100'000, 3);
  StagedReader reader({{dir.path / "a.bin", 0, 100'000}, {dir.path / "a.bin", 5, 10}}, heap(), 1000, 2, 4096);
  EXPECT_EQ(std::string(static_cast<const char*>(reader.take(0)), 100'000), a);
  reader.release(0);
  EXPECT_EQ(std::string(static_cast<const char*>(reader.take(1)), 10), a.substr(5, 10));
  reader.release(1);
}

TEST(StagedReader, AReadPastTheEndOfTheFileIsAnErrorNamingIt) {
  TempDir dir;
  random_file(dir.path / "short.bin", 1000, 4);
  StagedReader reader({{dir.path / "short.bin", 500, 1000}}, heap(), 4096, 2, 256);
  try {
    reader.take(0);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("end of file"), std::string::npos) << e.what();
  }
}

TEST(StagedReader, AMissingFileIsAnErrorNamingIt) {
  TempDir dir;
  try {
    StagedReader reader({{dir.path / "gone.safetensors", 0, 8}}, heap(), 4096, 2);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gone.safetensors"), std::string::npos) << e.what();
  }
}

TEST(StagedReader, DestroyedWithRangesUnreadStopsItsThreads) {
  TempDir dir;
  random_file(dir.path / "a.bin", 50'000, 5);
  std::vector<FileRange> ranges(100, FileRange{dir.path / "a.bin", 0, 40'000});
  StagedReader reader(ranges, heap(), 50'000, 4, 1000);
  (void)reader.take(0);  // the rest cannot be placed while range 0 is held: readers wait, then stop
}

TEST(ParallelRead, ReadsEveryByteOfEveryFile) {
  TempDir dir;
  random_file(dir.path / "a.bin", 123'457, 6);
  random_file(dir.path / "b.bin", 10, 7);
  random_file(dir.path / "c.bin", 0, 8);
  EXPECT_EQ(read_files_in_parallel({dir.path / "a.bin", dir.path / "b.bin", dir.path / "c.bin"}, 3, 4096), 123'467u);
  EXPECT_TRUE(drop_from_page_cache(dir.path / "a.bin"));
  EXPECT_FALSE(drop_from_page_cache(dir.path / "missing.bin"));
}

// The pages of `file` (of `bytes` bytes) in the page cache, as mincore reports them.
size_t resident_pages(const fs::path& file, size_t bytes) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << file;
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(map, MAP_FAILED) << file;
  if (map == MAP_FAILED) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(map, bytes, in_core.data()), 0);
  ::munmap(map, bytes);
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1u;
  return n;
}

// A file written moments before is dropped whole: its pages are still dirty, which posix_fadvise
// alone leaves cached (measured on this machine's ext4: 6144 of 16384 pages stayed), so `bench load
// --cold` timed part of a fresh checkpoint from memory.
TEST(ParallelRead, DropsAFileJustWrittenFromThePageCache) {
  TempDir dir;
  struct statfs fs_info {};
  ASSERT_EQ(::statfs(dir.path.c_str(), &fs_info), 0);
  if (fs_info.f_type == TMPFS_MAGIC) GTEST_SKIP() << "a tmpfs file lives in the page cache: nothing to drop";
  const size_t bytes = size_t{32} << 20;
  random_file(dir.path / "fresh.bin", bytes, 9);
  ASSERT_GT(resident_pages(dir.path / "fresh.bin", bytes), 0u) << "the write did not go through the page cache";
  ASSERT_TRUE(drop_from_page_cache(dir.path / "fresh.bin"));
  EXPECT_EQ(resident_pages(dir.path / "fresh.bin", bytes), 0u);
}

}  // namespace
}  // namespace tessera::io
