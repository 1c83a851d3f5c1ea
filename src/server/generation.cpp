#include "server/generation.h"

#include "core/error.h"
#include "server/api_error.h"

namespace basalt::server {

using clk = std::chrono::steady_clock;

Generation::Generation(ServerContext& ctx, GenSpec spec)
    : ctx_(ctx),
      ch_(std::make_shared<Channel>()),
      dec_(ctx.tok),
      stop_(spec.stop),
      want_logprobs_(spec.logprobs),
      start_(clk::now()) {
  if (spec.parser) parser_ = std::make_unique<OutputParser>(*spec.parser);
  std::weak_ptr<Channel> wch = ch_;
  try {
    id_ = ctx_.engine.submit(std::move(spec.req), [wch](const TokenEvent& te) {
      if (auto ch = wch.lock()) {
        {
          std::lock_guard<std::mutex> lk(ch->mu);
          ch->q.emplace_back(te, clk::now());
        }
        ch->cv.notify_one();
      }
    });
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "", "invalid_request_error");
  }
  ctx_.metrics.generation_started();
}

Generation::~Generation() {
  if (!finished_) {
    ctx_.engine.cancel(id_);
    ctx_.metrics.generation_finished("cancelled");
  }
}

void Generation::cancel() {
  if (!finished_ && !cancelled_) {
    cancelled_ = true;
    ctx_.engine.cancel(id_);
  }
}

bool Generation::poll(std::vector<GenEvent>& out, std::chrono::milliseconds wait) {
  if (finished_) return true;
  if (ctx_.stopping.load()) cancel();
  std::deque<std::pair<TokenEvent, clk::time_point>> got;
  {
    std::unique_lock<std::mutex> lk(ch_->mu);
    ch_->cv.wait_for(lk, wait, [&] { return !ch_->q.empty(); });
    got.swap(ch_->q);
  }
  for (auto& [te, t] : got) {
    on_token(te, t, out);
    if (finished_) break;
  }
  return finished_;
}

void Generation::run_to_end(std::vector<GenEvent>& out) {
  while (!poll(out, std::chrono::milliseconds(250))) {
  }
}

void Generation::on_token(const TokenEvent& te, clk::time_point t, std::vector<GenEvent>& out) {
  if (te.token >= 0) {
    const double since =
        std::chrono::duration<double>(t - (got_token_ ? last_token_ : start_)).count();
    if (got_token_)
      ctx_.metrics.observe_itl(since);
    else
      ctx_.metrics.observe_ttft(since);
    got_token_ = true;
    last_token_ = t;
    const bool special = ctx_.tok.is_special(te.token);
    if (want_logprobs_) {
      TokenLogprob lp;
      const int32_t one[1] = {te.token};
      lp.text = ctx_.tok.decode(one);
      lp.logprob = te.logprob;
      for (const auto& [id, l] : te.top) {
        const int32_t alt[1] = {id};
        lp.top.emplace_back(ctx_.tok.decode(alt), l);
      }
      if (!text_ended_) pending_lp_.push_back(std::move(lp));
    }
    if (!special) feed(dec_.push(te.token), out);
  }
  if (!te.finished) return;
  end_text(out);
  prompt_tokens_ = te.prompt_tokens;
  completion_tokens_ = te.completion_tokens;
  cached_tokens_ = te.cached_prompt_tokens;
  if (te.finish_reason == "error") {
    finish_reason_ = "error";
    error_ = te.error;
  } else if (stop_.hit()) {
    finish_reason_ = "stop";
  } else if (te.finish_reason == "cancelled") {
    finish_reason_ = "cancelled";
  } else {
    finish_reason_ = te.finish_reason == "length" ? "length" : "stop";
  }
  if (finish_reason_ == "stop" && tool_calls_ > 0) finish_reason_ = "tool_calls";
  finished_ = true;
  ctx_.metrics.count_tokens(prompt_tokens_, completion_tokens_);
  ctx_.metrics.generation_finished(finish_reason_);
}

void Generation::feed(const std::string& text, std::vector<GenEvent>& out) {
  if (text_ended_ || text.empty()) return;
  std::string safe = stop_.push(text);
  parse(safe, false, out);
  if (stop_.hit()) {
    end_text(out);
    cancel();  // the rest of the text is not wanted
  }
}

void Generation::end_text(std::vector<GenEvent>& out) {
  if (text_ended_) return;
  if (!stop_.hit()) {
    std::string rest = stop_.push(dec_.flush());
    rest += stop_.flush();
    parse(rest, true, out);
  } else {
    parse("", true, out);
  }
  text_ended_ = true;
  if (!pending_lp_.empty()) {  // tokens whose text was held back or was a stop string
    GenEvent e;
    e.logprobs = std::move(pending_lp_);
    pending_lp_.clear();
    out.push_back(std::move(e));
  }
}

void Generation::parse(const std::string& text, bool end, std::vector<GenEvent>& out) {
  std::vector<ParserEvent> evs;
  if (parser_) {
    if (!text.empty()) evs = parser_->push(text);
    if (end) {
      auto tail = parser_->finish();
      evs.insert(evs.end(), tail.begin(), tail.end());
    }
  } else if (!text.empty()) {
    evs.push_back(ParserEvent{ParserEvent::Content, text});
  }
  for (ParserEvent& pe : evs) {
    GenEvent e;
    e.kind = pe.kind;
    e.text = std::move(pe.text);
    e.index = pe.index;
    e.id = std::move(pe.id);
    e.name = std::move(pe.name);
    if (e.kind == ParserEvent::Reasoning) reasoning_chars_ += int64_t(e.text.size());
    if (e.kind == ParserEvent::ToolCallBegin) ++tool_calls_;
    if (e.kind == ParserEvent::Content && !pending_lp_.empty()) {
      e.logprobs = std::move(pending_lp_);
      pending_lp_.clear();
    }
    out.push_back(std::move(e));
  }
}

}  // namespace basalt::server
