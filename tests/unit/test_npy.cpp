#include <gtest/gtest.h>

#include <filesystem>

#include "core/blob.h"
#include "io/npy.h"
#include "io_test_util.h"
#include "test_util.h"

namespace basalt::io {
namespace {

using test::Bytes;
using test::expect_error;
using test::TempDir;

Bytes npy_bytes(const std::string& dict, const Bytes& data, uint8_t major = 1) {
  Bytes b{0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  std::string h = dict;
  size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  if (major == 1)
    test::put<uint16_t>(b, uint16_t(h.size()));
  else
    test::put<uint32_t>(b, uint32_t(h.size()));
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

TEST(Npy, WriteReadRoundTrip) {
  TempDir dir;
  std::string p = dir.str() + "/a.npy";
  std::vector<float> v{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  npy_write_f32(p, v.data(), {2, 3});
  NpyArray a = npy_read(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, v);
  EXPECT_EQ(std::filesystem::file_size(p), 128u + 24u);  // header padded to 64, then data
  npy_write_f32(p, v.data(), {6});
  EXPECT_EQ(npy_read(p).shape, (std::vector<int64_t>{6}));
  npy_write_f32(p, v.data(), {});
  EXPECT_EQ(npy_read(p).data, (std::vector<float>{1.5f}));
  npy_write_f32(p, v.data(), {0, 4});
  EXPECT_TRUE(npy_read(p).data.empty());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 1);  // no temp left
}

TEST(Npy, HeaderIsWhatNumpyWrites) {
  TempDir dir;
  std::string p = dir.str() + "/a.npy";
  float x[3] = {1, 2, 3};
  npy_write_f32(p, x, {3});
  std::string s = basalt::read_text_file(p);
  EXPECT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(s.substr(10, dict.size()), dict);
  ASSERT_EQ(s.size(), 128u + 12u);  // 10 + header = 128, a multiple of 64
  EXPECT_EQ(uint8_t(s[8]) + 256 * uint8_t(s[9]), 118);
  EXPECT_EQ(s.substr(10 + dict.size(), 118 - dict.size() - 1),
            std::string(118 - dict.size() - 1, ' '));
  EXPECT_EQ(s[127], '\n');
}

TEST(Npy, ReadsF64AndVersion2) {
  TempDir dir;
  std::string p = dir.str() + "/d.npy";
  test::write_file(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }",
                                test::bytes_of(std::vector<double>{0.5, -1e10}), 2));
  NpyArray a = npy_read(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.data, (std::vector<float>{0.5f, -1e10f}));
}

TEST(Npy, Errors) {
  TempDir dir;
  std::string p = dir.str() + "/bad.npy";
  auto bad = [&](const Bytes& b, const std::string& what) {
    test::write_file(p, b);
    expect_error([&] { npy_read(p); }, {"[npy] " + p + ": ", what});
  };
  Bytes f4 = test::bytes_of(std::vector<float>{1, 2});
  bad(Bytes{'x', 'y'}, "not a .npy file");
  bad(npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", f4),
      "dtype '<i4' is not supported");
  bad(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
      "dtype '>f4' is not supported");
  bad(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4),
      "Fortran-order arrays are not supported");
  bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4),
      "data is 8 bytes, shape (3,) needs 12");
  bad(npy_bytes("{'descr': '<f4', 'fortran_order': False}", f4), "header has no 'shape'");
  bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4, 7),
      "unsupported .npy version 7.0");
  expect_error([&] { npy_read(dir.str() + "/none.npy"); }, {"cannot open"});
  float x = 1;
  expect_error([&] { npy_write_f32(dir.str() + "/no/such/dir/a.npy", &x, {1}); },
               {"[npy] " + dir.str() + "/no/such/dir/a.npy: cannot create"});
}

}  // namespace
}  // namespace basalt::io
