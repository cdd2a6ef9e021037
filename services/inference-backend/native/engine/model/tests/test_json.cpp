#include <cstdint>
#include <string>

#include "check.h"
#include "strata/json.h"

using strata::JsonError;
using strata::JsonValue;
using strata::parse_json;

namespace {

// The byte offset a parse error reports, or -1 when it parses.
long error_offset(const std::string& text) {
  try {
    parse_json(text);
  } catch (const JsonError& e) {
    return static_cast<long>(e.offset());
  }
  return -1;
}

}  // namespace

TEST_CASE("json: objects, arrays, literals in document order") {
  JsonValue v = parse_json(R"( {"a": [1, 2.5, -3e2, true, false, null], "b": {"c": "d"}, "e": {}} )");
  CHECK(v.is_object());
  CHECK_EQ(v.size(), size_t{3});
  CHECK(v.key(0) == "a");
  CHECK(v.key(2) == "e");
  const JsonValue* a = v.find("a");
  CHECK(a != nullptr && a->is_array() && a->size() == 6);
  CHECK_EQ((*a)[0].as_int64(), int64_t{1});
  CHECK((*a)[0].is_integer());
  CHECK(!(*a)[1].is_integer());
  CHECK_NEAR((*a)[1].as_number(), 2.5, 0);
  CHECK_NEAR((*a)[2].as_number(), -300.0, 0);
  CHECK((*a)[3].as_bool());
  CHECK(!(*a)[4].as_bool());
  CHECK((*a)[5].is_null());
  CHECK(v.find("b")->find("c")->as_string() == "d");
  CHECK(v.find("missing") == nullptr);
  CHECK(v.find("e")->is_object() && v.find("e")->size() == 0);
}

TEST_CASE("json: string escapes, \\u escapes and surrogate pairs become UTF-8") {
  JsonValue v = parse_json(R"(["a\"b\\c\/d\b\f\n\r\t", "\u00e9\u4e2d", "\ud83d\ude00", "caf\u00E9", "ü"])");
  CHECK(v[0].as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(v[1].as_string() == "\xc3\xa9\xe4\xb8\xad");
  CHECK(v[2].as_string() == "\xf0\x9f\x98\x80");
  CHECK(v[3].as_string() == "caf\xc3\xa9");
  CHECK(v[4].as_string() == "\xc3\xbc");
}

TEST_CASE("json: integers keep full int64 precision") {
  JsonValue v = parse_json("[9007199254740993, -9223372036854775808, 0, -0]");
  CHECK_EQ(v[0].as_int64(), int64_t{9007199254740993});
  CHECK_EQ(v[1].as_int64(), INT64_MIN);
  CHECK_EQ(v[2].as_int64(), int64_t{0});
  CHECK(v[3].is_integer());
  CHECK_NEAR(parse_json("1e-400").as_number(), 0.0, 0);
  CHECK_EQ(error_offset("1e400"), 0L);
}

TEST_CASE("json: malformed input reports the byte offset") {
  CHECK_EQ(error_offset("{\"a\": 1,}"), 8L);          // trailing comma
  CHECK_EQ(error_offset("[01]"), 2L);                  // leading zero
  CHECK_EQ(error_offset("\"abc"), 4L);                 // unterminated string
  CHECK_EQ(error_offset("\"a\\x\""), 2L);              // bad escape
  CHECK_EQ(error_offset("{\"a\": 1, \"a\": 2}"), 9L);  // duplicate key
  CHECK_EQ(error_offset("[1] x"), 4L);                 // trailing garbage
  CHECK_EQ(error_offset("\"a\nb\""), 2L);              // raw control character
  CHECK_EQ(error_offset("\"\xff\""), 1L);              // invalid UTF-8
  CHECK_EQ(error_offset("\"\\ud83d\""), 1L);           // unpaired surrogate
  CHECK_EQ(error_offset("[1."), 3L);
  CHECK_EQ(error_offset("-"), 1L);
  CHECK_EQ(error_offset("tru"), 0L);
  CHECK_EQ(error_offset(""), 0L);
  CHECK_EQ(error_offset("{1: 2}"), 1L);
  CHECK_EQ(error_offset("[1 2]"), 3L);
  CHECK(error_offset(std::string(300, '[') + std::string(300, ']')) >= 0);  // depth limit, no stack overflow
  CHECK_EQ(error_offset(std::string(200, '[') + std::string(200, ']')), -1L);
}

TEST_CASE("json: error messages say what is wrong") {
  try {
    parse_json("{\"a\" 1}");
    CHECK(false);
  } catch (const JsonError& e) {
    CHECK(std::string(e.what()).find("expected ':'") != std::string::npos);
    CHECK(std::string(e.what()).find("at byte 5") != std::string::npos);
  }
  JsonValue v = parse_json("{\"n\": \"x\"}");
  CHECK_THROWS(v.find("n")->as_int64());
  CHECK_THROWS(v.as_string());
}

TEST_MAIN()
