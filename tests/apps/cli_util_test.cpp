#define BOOST_TEST_MODULE cli_util
#include <boost/test/unit_test.hpp>

#include <string>

#include "apps/cli_util.hpp"

using namespace dally::apps;

BOOST_AUTO_TEST_CASE(durations) {
  BOOST_CHECK_EQUAL(parse_duration_ms("1500").value(), 1500);
  BOOST_CHECK_EQUAL(parse_duration_ms("0").value(), 0);
  BOOST_CHECK_EQUAL(parse_duration_ms("500ms").value(), 500);
  BOOST_CHECK_EQUAL(parse_duration_ms("5s").value(), 5000);
  BOOST_CHECK_EQUAL(parse_duration_ms("2m").value(), 120'000);
  BOOST_CHECK_EQUAL(parse_duration_ms("2min").value(), 120'000);
  BOOST_CHECK_EQUAL(parse_duration_ms("1h").value(), 3'600'000);
  BOOST_CHECK_EQUAL(parse_duration_ms("1d").value(), 86'400'000);
  BOOST_CHECK_EQUAL(parse_duration_ms("1h30m").value(), 5'400'000);
  BOOST_CHECK_EQUAL(parse_duration_ms("1s250ms").value(), 1250);
  for (auto bad : {"", "-5", "5x", "s", "1.5s", " 5s", "5s ", "1h 30m",
                   "99999999999999999999", "9999999999999999d", "+5"})
    BOOST_CHECK_MESSAGE(!parse_duration_ms(bad), "accepted '" << bad << "'");
}

BOOST_AUTO_TEST_CASE(times) {
  BOOST_CHECK_EQUAL(parse_time_ms("0").value(), 0);
  BOOST_CHECK_EQUAL(parse_time_ms("1795341600000").value(), 1795341600000);
  // 2026-11-22T10:00:00Z
  constexpr int64_t t = 1795341600000;
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00:00Z").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00:00z").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22 10:00:00Z").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00Z").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00:00.250Z").value(), t + 250);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T11:00:00+01:00").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T05:30:00-04:30").value(), t);
  BOOST_CHECK_EQUAL(parse_time_ms("1970-01-01T00:00:00Z").value(), 0);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00:00.2Z").value(), t + 200);
  BOOST_CHECK_EQUAL(parse_time_ms("2026-11-22T10:00:00.25Z").value(), t + 250);
  BOOST_CHECK_EQUAL(parse_time_ms("2024-02-29T00:00:00Z").value(),
                    1709164800000);
  BOOST_CHECK_EQUAL(parse_time_ms("9999-12-31T23:59:59.999Z").value(),
                    253402300799999);
  for (auto bad : {"",
                   "2026-11-22",
                   "2026-11-22T10:00:00",
                   "2026-11-22T10:00:00Zjunk",
                   "2026-13-22T10:00:00Z",
                   "1969-12-31T23:59:59Z",
                   "-5",
                   "tomorrow",
                   "99999999999999999999",
                   "2026-02-29T00:00:00Z",
                   "2026-11-22T24:00:00Z",
                   "2026-11-22T10:60:00Z",
                   "2026-11-22T10:00:60Z",
                   "2026-11-22T10:00:00.1234Z",
                   "2026-11-22T10:00:00.Z",
                   "2026-11-22T10:00:00+0100",
                   "2026-11-22T10:00:00+24:00",
                   "26-11-22T10:00:00Z",
                   "2026-11-22T10:00:00Z ",
                   "x2026-11-22T10:00:00Z"})
    BOOST_CHECK_MESSAGE(!parse_time_ms(bad), "accepted '" << bad << "'");
}

BOOST_AUTO_TEST_CASE(uints) {
  BOOST_CHECK_EQUAL(parse_uint("42").value(), 42u);
  BOOST_CHECK_EQUAL(parse_uint("65535", 65535).value(), 65535u);
  BOOST_CHECK(!parse_uint("65536", 65535));
  BOOST_CHECK(!parse_uint("-1"));
  BOOST_CHECK(!parse_uint("+1"));
  BOOST_CHECK(!parse_uint("1a"));
  BOOST_CHECK(!parse_uint(""));
  BOOST_CHECK(!parse_uint("18446744073709551616"));
}

BOOST_AUTO_TEST_CASE(json_strings) {
  BOOST_CHECK_EQUAL(json_quote("hello"), "\"hello\"");
  BOOST_CHECK_EQUAL(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  BOOST_CHECK_EQUAL(json_quote("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
  BOOST_CHECK_EQUAL(json_quote(std::string{"\0\x01\x1f\x7f", 4}),
                    "\"\\u0000\\u0001\\u001f\\u007f\"");
  // Well-formed UTF-8 stays as it is.
  BOOST_CHECK_EQUAL(
    json_quote("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"),
    "\"gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // Stray bytes, a truncated sequence, an overlong form, a surrogate.
  BOOST_CHECK_EQUAL(json_quote("\xff\xfe"), "\"\\u00ff\\u00fe\"");
  BOOST_CHECK_EQUAL(json_quote("a\xe2\x82"), "\"a\\u00e2\\u0082\"");
  BOOST_CHECK_EQUAL(json_quote("\xc0\xaf"), "\"\\u00c0\\u00af\"");
  BOOST_CHECK_EQUAL(json_quote("\xed\xa0\x80"), "\"\\u00ed\\u00a0\\u0080\"");
}

BOOST_AUTO_TEST_CASE(base64_encoding) {
  BOOST_CHECK_EQUAL(base64(""), "");
  BOOST_CHECK_EQUAL(base64("f"), "Zg==");
  BOOST_CHECK_EQUAL(base64("fo"), "Zm8=");
  BOOST_CHECK_EQUAL(base64("foo"), "Zm9v");
  BOOST_CHECK_EQUAL(base64("foobar"), "Zm9vYmFy");
  BOOST_CHECK_EQUAL(base64(std::string{"\xff\x00\x80", 3}), "/wCA");
}

BOOST_AUTO_TEST_CASE(terminal_text) {
  BOOST_CHECK_EQUAL(printable("plain text"), "plain text");
  BOOST_CHECK_EQUAL(printable("a\nb\\c"), "a\\nb\\\\c");
  BOOST_CHECK_EQUAL(printable(std::string{"\x1b[2J\0", 5}), "\\x1b[2J\\x00");
  BOOST_CHECK_EQUAL(printable("\xc3\xbc\xff"), "\xc3\xbc\\xff");
}

BOOST_AUTO_TEST_CASE(json_objects) {
  json_object obj;
  obj.add("id", uint64_t{7})
    .add("due_ms", int64_t{-1})
    .add("ok", true)
    .add("topic", "t\"1")
    .add_raw("list", "[1,2]");
  BOOST_CHECK_EQUAL(
    obj.str(), R"({"id":7,"due_ms":-1,"ok":true,"topic":"t\"1","list":[1,2]})");
  BOOST_CHECK_EQUAL(json_object{}.str(), "{}");
  json_object text;
  add_payload(text, "hi");
  BOOST_CHECK_EQUAL(text.str(), R"({"payload":"hi"})");
  json_object bin;
  add_payload(bin, "\xff");
  BOOST_CHECK_EQUAL(bin.str(),
                    R"({"payload":"\u00ff","payload_base64":"/w=="})");
}

BOOST_AUTO_TEST_CASE(option_joining) {
  std::set<std::string, std::less<>> valued{"port", "data-dir", "dally.port"};
  std::vector<std::string> in{"--port",       "0",    "--data-dir=/x",
                              "--dally.port", "5",    "--flag",
                              "--data-dir",   "/y z", "--port"};
  std::vector<std::string> want{"--port=0", "--data-dir=/x",   "--dally.port=5",
                                "--flag",   "--data-dir=/y z", "--port"};
  BOOST_CHECK(join_option_values(in, valued) == want);
  std::vector<std::string> dashes{"--", "--port", "1"};
  BOOST_CHECK(join_option_values(dashes, valued) == dashes);
}

BOOST_AUTO_TEST_CASE(cluster_seeds) {
  std::string err;
  auto seeds = parse_cluster_seeds("1@127.0.0.1:7501,2@localhost:7502", err);
  BOOST_TEST(err.empty());
  BOOST_REQUIRE_EQUAL(seeds.size(), 2u);
  BOOST_TEST(seeds[0].id == 1u);
  BOOST_TEST(seeds[0].host == "127.0.0.1");
  BOOST_TEST(seeds[0].port == 7501);
  BOOST_TEST(seeds[1].id == 2u);
  BOOST_TEST(seeds[1].host == "localhost");
  BOOST_TEST(seeds[1].port == 7502);
  for (const char* bad :
       {"", "1@127.0.0.1", "127.0.0.1:7501", "0@h:1", "x@h:1", "1@h:0",
        "1@h:65536", "1@:7501", "1@h:1,", "1@h:1,1@h:2", "1@h:1,2@h:1"}) {
    BOOST_TEST_CONTEXT(bad) {
      BOOST_TEST(parse_cluster_seeds(bad, err).empty());
      BOOST_TEST(!err.empty());
    }
  }
  parse_cluster_seeds("1@h:1,1@h:2", err);
  BOOST_TEST(err == "node id 1 is listed twice");
}
