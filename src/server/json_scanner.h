// JsonScanner: an incremental JSON syntax check, one byte at a time. The tool-call parser uses
// it to stream a call's arguments as the model writes them while knowing where the value ends
// and whether it is still valid JSON.
#pragma once
#include <string>
#include <vector>

namespace basalt::server {

class JsonScanner {
 public:
  enum class Step {
    More,        // the byte fits; the value is not complete yet
    Done,        // the byte completed the value
    DoneBefore,  // a top-level number ended just before this byte (not consumed)
    Error,       // the byte cannot continue valid JSON
  };

  void reset();                        // expects one value
  void reset_in_object_after_value();  // inside an object, just after a member's value
  Step feed(char c);
  bool in_string() const { return st_ == St::Str || st_ == St::Esc || st_ == St::Hex; }
  bool at_start() const { return st_ == St::Value && stack_.empty(); }
  // At the end of the text: a pending top-level number is a complete value.
  bool complete_at_end() const;

 private:
  enum class St { Value, ObjFirst, ObjKey, Colon, After, ArrFirst, Str, Esc, Hex, Num, Lit, End };
  Step value_end();

  std::vector<char> stack_;  // '{' or '['
  St st_ = St::Value;
  bool key_ = false;  // the string being read is an object key
  int hex_ = 0;
  std::string tok_;  // the number or literal being read
};

}  // namespace basalt::server
