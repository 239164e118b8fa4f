// The lowering table's lint (STYLE.md rule 2): each op has one lowering, registered by one
// table line, and the table lines of each source file form blocks sorted by op name.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "lowering/lowering.h"

namespace tpu::test {
namespace {

TEST(LoweringTableLint, NoOpIsRegisteredTwice) {
  std::map<std::string, std::string> first;  // op -> file:line of its first table line
  for (const lowering::Registration& r : lowering::Registrations()) {
    std::string where = r.file + ":" + std::to_string(r.line);
    auto [it, inserted] = first.emplace(r.op, where);
    EXPECT_TRUE(inserted) << r.op << " is registered at " << it->second << " and again at " << where;
  }
  EXPECT_GT(first.size(), 50u);
}

// A block is a run of table lines on consecutive source lines; a blank line or code starts
// the next block.
TEST(LoweringTableLint, EachTableBlockIsSorted) {
  std::map<std::string, std::map<int, std::string>> by_file;  // file -> line -> op
  for (const lowering::Registration& r : lowering::Registrations()) by_file[r.file][r.line] = r.op;
  for (const auto& [file, lines] : by_file) {
    int previous_line = -2;
    std::string previous_op;
    for (const auto& [line, op] : lines) {
      if (line == previous_line + 1)
        EXPECT_LT(previous_op, op) << file << ":" << line << ": " << op << " comes after " << previous_op
                                   << " in its table block";
      previous_line = line;
      previous_op = op;
    }
  }
}

// The lint itself: an out-of-order pair on consecutive lines is what the test above reports.
TEST(LoweringTableLint, RegistrationsCarryTheirSourceLine) {
  for (const lowering::Registration& r : lowering::Registrations()) {
    EXPECT_FALSE(r.file.empty()) << r.op;
    EXPECT_GT(r.line, 0) << r.op;
  }
}

}  // namespace
}  // namespace tpu::test
