#include "strata/json.h"

#include <charconv>
#include <unordered_set>

namespace strata {

namespace {
// Deep enough for any config; shallow enough that hostile input cannot exhaust the stack.
constexpr int kMaxDepth = 256;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
}  // namespace

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  JsonValue parse_document() {
    skip_whitespace();
    JsonValue value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected character after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw JsonError(message, pos_); }
  [[noreturn]] void fail_at(const std::string& message, size_t at) const { throw JsonError(message, at); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 256 levels");
    if (at_end()) fail("unexpected end of input, expected a value");
    JsonValue value;
    value.offset_ = pos_;
    switch (text_[pos_]) {
      case '{': parse_object(value, depth); break;
      case '[': parse_array(value, depth); break;
      case '"':
        value.kind_ = JsonValue::Kind::String;
        value.string_ = parse_string();
        break;
      case 't': parse_literal("true"); value.kind_ = JsonValue::Kind::Bool; value.bool_ = true; break;
      case 'f': parse_literal("false"); value.kind_ = JsonValue::Kind::Bool; value.bool_ = false; break;
      case 'n': parse_literal("null"); value.kind_ = JsonValue::Kind::Null; break;
      default:
        if (text_[pos_] == '-' || (text_[pos_] >= '0' && text_[pos_] <= '9')) {
          parse_number(value);
        } else {
          fail(std::string("unexpected character '") + text_[pos_] + "', expected a value");
        }
    }
    return value;
  }

  void parse_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal, expected '" + std::string(word) + "'");
    pos_ += word.size();
  }

  void parse_object(JsonValue& value, int depth) {
    value.kind_ = JsonValue::Kind::Object;
    ++pos_;  // '{'
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_whitespace();
      if (peek() != '"' || at_end()) fail("expected a string key");
      size_t key_offset = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) fail_at("duplicate key \"" + key + "\"", key_offset);
      skip_whitespace();
      expect(':');
      skip_whitespace();
      value.keys_.push_back(std::move(key));
      value.items_.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      if (peek() == '}' && !at_end()) {
        ++pos_;
        return;
      }
      fail("expected ',' or '}' in object");
    }
  }

  void parse_array(JsonValue& value, int depth) {
    value.kind_ = JsonValue::Kind::Array;
    ++pos_;  // '['
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_whitespace();
      value.items_.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      if (peek() == ']' && !at_end()) {
        ++pos_;
        return;
      }
      fail("expected ',' or ']' in array");
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= static_cast<uint32_t>(c - 'A' + 10);
      else fail_at("invalid hex digit in \\u escape", pos_ - 1);
    }
    return cp;
  }

  // Checks one UTF-8 sequence starting at pos_ (RFC 3629: no overlongs, no surrogates).
  void copy_utf8_sequence(std::string& out) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[i]); };
    unsigned char lead = byte(pos_);
    int length = 0;
    uint32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) { length = 2; cp = lead & 0x1F; }
    else if (lead >= 0xE0 && lead <= 0xEF) { length = 3; cp = lead & 0x0F; }
    else if (lead >= 0xF0 && lead <= 0xF4) { length = 4; cp = lead & 0x07; }
    else fail("invalid UTF-8 byte in string");
    if (pos_ + length > text_.size()) fail("truncated UTF-8 sequence in string");
    for (int i = 1; i < length; ++i) {
      unsigned char c = byte(pos_ + i);
      if ((c & 0xC0) != 0x80) fail("invalid UTF-8 continuation byte in string");
      cp = (cp << 6) | (c & 0x3F);
    }
    bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8 sequence in string");
    out.append(text_.substr(pos_, length));
    pos_ += length;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in string");
      if (c >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      size_t escape_offset = pos_;
      ++pos_;
      if (at_end()) fail("unterminated escape in string");
      char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at("unpaired low surrogate in \\u escape", escape_offset);
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail_at("unpaired high surrogate in \\u escape", escape_offset);
            pos_ += 2;
            uint32_t low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail_at("invalid low surrogate in \\u escape", escape_offset);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail_at("invalid escape in string", escape_offset);
      }
    }
  }

  // Grammar per RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void parse_number(JsonValue& value) {
    size_t start = pos_;
    const auto digits = [&]() {
      size_t begin = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - begin;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') fail("leading zero in number");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    bool integral = true;
    if (peek() == '.' && !at_end()) {
      integral = false;
      ++pos_;
      if (digits() == 0) fail("expected a digit after '.'");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected a digit in exponent");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    value.kind_ = JsonValue::Kind::Number;
    auto [ptr, ec] = std::from_chars(first, last, value.number_);
    std::string_view literal(first, static_cast<size_t>(last - first));
    if (ec == std::errc::result_out_of_range) {
      // from_chars reports underflow like overflow; a tiny magnitude (negative exponent or a
      // zero integer part) is an underflow and reads as zero, anything else really overflows.
      bool tiny = literal.find("e-") != std::string_view::npos || literal.find("E-") != std::string_view::npos ||
                  literal.starts_with("0") || literal.starts_with("-0");
      if (!tiny) fail_at("number out of range", start);
      value.number_ = 0.0;
    } else if (ec != std::errc() || ptr != last) {
      fail_at("invalid number", start);
    }
    if (integral) {
      int64_t integer = 0;
      auto [iptr, iec] = std::from_chars(first, last, integer);
      if (iec == std::errc() && iptr == last) {
        value.is_integer_ = true;
        value.integer_ = integer;
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

const char* JsonValue::kind_name(Kind kind) {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  return "?";
}

bool JsonValue::as_bool() const {
  if (kind_ != Kind::Bool) throw JsonError(std::string("expected a boolean, found ") + kind_name(kind_), offset_);
  return bool_;
}

double JsonValue::as_number() const {
  if (kind_ != Kind::Number) throw JsonError(std::string("expected a number, found ") + kind_name(kind_), offset_);
  return number_;
}

int64_t JsonValue::as_int64() const {
  if (!is_integer()) throw JsonError(std::string("expected an integer, found ") + kind_name(kind_), offset_);
  return integer_;
}

const std::string& JsonValue::as_string() const {
  if (kind_ != Kind::String) throw JsonError(std::string("expected a string, found ") + kind_name(kind_), offset_);
  return string_;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (kind_ != Kind::Object) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &items_[i];
  }
  return nullptr;
}

JsonValue parse_json(std::string_view text) { return JsonParser(text).parse_document(); }

}  // namespace strata
