// The command-line options shared by generate, serve and the bench suites (bench/harness/options):
// --quantize's values and its error message. (In tests/bench/harness: the sanitized build, which
// does not build the bench library, leaves these out.)
#include "bench/harness/options.h"
#include "test_util.h"

namespace braid::test {
namespace {

TEST(QuantizeOption, ParsesNoneAndFp8AndNamesTheCommand) {
  EXPECT_EQ(bench::quantize_from_option("fp8", "generate"), model::Quantize::fp8);
  EXPECT_EQ(bench::quantize_from_option("none", "serve"), model::Quantize::none);
  expect_error([] { bench::quantize_from_option("int8", "generate"); }, ErrorKind::invalid_argument,
               {"generate", "--quantize", "none or fp8", "'int8'"});
  expect_error([] { bench::quantize_from_option("", "bench decode"); }, ErrorKind::invalid_argument,
               {"bench decode", "--quantize"});
}

}  // namespace
}  // namespace braid::test
