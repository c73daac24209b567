#define BOOST_TEST_MODULE answer_deadlines
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "logic/answer_deadlines.hpp"

using dally::logic::answer_deadlines;

BOOST_AUTO_TEST_CASE(due_requests_come_out_earliest_first_and_only_once) {
  answer_deadlines d;
  BOOST_TEST(d.next_ms() == answer_deadlines::never_ms);
  d.track(300, 7);
  d.track(100, 9);
  d.track(100, 3);
  d.track(200, 5);
  BOOST_TEST(d.next_ms() == 100);
  BOOST_TEST(d.pop_due(99).empty());
  auto first = d.pop_due(200);
  BOOST_TEST((first == std::vector<uint64_t>{3, 9, 5}));
  BOOST_TEST(d.next_ms() == 300);
  BOOST_TEST(d.pop_due(200).empty());
  BOOST_TEST((d.pop_due(1'000) == std::vector<uint64_t>{7}));
  BOOST_TEST(d.empty());
}

BOOST_AUTO_TEST_CASE(an_answer_removes_its_request_and_nothing_else) {
  answer_deadlines d;
  d.track(100, 1);
  d.track(100, 2);
  d.track(150, 3);
  d.untrack(100, 1);
  // A pair that was never tracked (or already timed out) changes nothing.
  d.untrack(150, 2);
  d.untrack(999, 3);
  BOOST_TEST(d.size() == 2u);
  BOOST_TEST((d.pop_due(1'000) == std::vector<uint64_t>{2, 3}));
  // Answered after its timeout came out: ignored.
  d.untrack(100, 2);
  BOOST_TEST(d.empty());
}
