#define BOOST_TEST_MODULE schedule_admission
#include <boost/test/unit_test.hpp>

#include "logic/schedule_admission.hpp"

// The engine's admission of new tasks, without CAF.

using namespace dally;

BOOST_AUTO_TEST_CASE(a_shard_takes_new_tasks_up_to_its_bound_and_no_more) {
  logic::schedule_admission a{2, 4};
  BOOST_TEST(a.admit(0, 3));
  BOOST_TEST(a.admit(0, 1));
  BOOST_TEST(!a.admit(0, 1));
  BOOST_TEST(a.admit(1, 4)); // another shard has its own bound
  BOOST_TEST(!a.admit(1, 1));
  BOOST_TEST(a.pending(0) == 4u);
  auto r = a.report();
  BOOST_TEST(r.pending == 8u);
  BOOST_TEST(r.peak_per_shard == 4u);
  BOOST_TEST(r.refused == 2u);
}

BOOST_AUTO_TEST_CASE(answers_make_room_again) {
  logic::schedule_admission a{1, 4};
  BOOST_TEST(a.admit(0, 4));
  BOOST_TEST(!a.admit(0, 2));
  a.answered(0, 1);
  BOOST_TEST(!a.admit(0, 2)); // a batch fits whole or not at all
  BOOST_TEST(a.admit(0, 1));
  a.answered(0, 3);
  BOOST_TEST(a.pending(0) == 1u);
  BOOST_TEST(a.admit(0, 3));
  BOOST_TEST(a.report().peak_per_shard == 4u);
}

BOOST_AUTO_TEST_CASE(a_request_larger_than_the_bound_goes_to_an_idle_shard) {
  logic::schedule_admission a{1, 4};
  BOOST_TEST(a.admit(0, 10));
  BOOST_TEST(!a.admit(0, 1));
  a.answered(0, 10);
  BOOST_TEST(a.admit(0, 1));
  BOOST_TEST(!a.admit(0, 10));
  BOOST_TEST(a.report().peak_per_shard == 10u);
}

BOOST_AUTO_TEST_CASE(a_stopped_shard_forgets_its_pending_tasks) {
  logic::schedule_admission a{2, 4};
  BOOST_TEST(a.admit(0, 4));
  BOOST_TEST(a.admit(1, 2));
  a.reset(0);
  BOOST_TEST(a.pending(0) == 0u);
  BOOST_TEST(a.pending(1) == 2u);
  a.answered(0, 3); // late answers of the stopped actor count nothing
  BOOST_TEST(a.pending(0) == 0u);
  BOOST_TEST(a.admit(0, 4));
}

BOOST_AUTO_TEST_CASE(without_a_bound_nothing_is_refused) {
  logic::schedule_admission a{1, 0};
  for (int i = 0; i < 1000; ++i)
    BOOST_TEST_REQUIRE(a.admit(0, 100));
  BOOST_TEST(a.report().refused == 0u);
  BOOST_TEST(a.report().pending == 100'000u);
}

BOOST_AUTO_TEST_CASE(the_refusal_says_overloaded_and_to_retry_later) {
  logic::schedule_admission a{3, 2};
  BOOST_TEST(a.admit(2, 2));
  auto err = a.refusal(2);
  BOOST_TEST((err.code() == core::errc::overloaded));
  BOOST_TEST(err.message().find("shard 2") != std::string::npos);
  BOOST_TEST(err.message().find("retry later") != std::string::npos);
}
