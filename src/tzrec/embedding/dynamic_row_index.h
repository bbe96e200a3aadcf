// DynamicRowIndex: the id -> row map of a `dynamicemb` table (TorchEasyRec's DynamicEmbedding,
// NVIDIA dynamicemb's semantics, run on CPU).
//
// Raw int64 ids get rows [0, max_capacity) in order of admission, so the table's memory follows
// the ids it holds. Each held id has a score: the training step of its last access (STEP), its
// access count (LFU: occurrences summed over steps), or none that matters (NO_EVICTION). A
// training step (Train) first refreshes the scores of the step's ids that hold rows; then its
// new ids, highest score first (ties: smaller id), are admitted: with frequency admission only
// once an admission counter (ids -> steps seen, or occurrences under LFU; at most
// counter_capacity ids, the lowest counts dropped) reaches the threshold. An admitted id takes a
// free row, or, in a full table, the row of the lowest-scored id not accessed in this step
// (ties: smaller id) when that score is not above its own (dynamicemb's bucket rule, with the
// whole table as one bucket); otherwise it is refused. Refused and not-yet-admitted ids read
// the table's `unadmitted_row` during training (a shared row holding the admission
// initialiser's constant; their gradients are dropped), and ids without a row read
// `missing_row` in evaluation and serving (the eval initialiser's constant).
//
// Deviations from dynamicemb, on purpose: TIMESTAMP ranks ids by the step of their last access
// (the order a device timer gives, but identical on every rank and across restarts); a full
// NO_EVICTION table refuses new ids instead of growing past max_capacity (it logs once).
//
// State (saved with the table): held ids ascending with their scores, the step counter, and the
// admission counter (ids ascending with counts). A restore assigns rows in id order.
//
// Thread safety: Map() may run concurrently with other Map() calls; Train()/RestoreState()
// need exclusive access (the trainer's one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/fg/dynamic_emb_spec.h"

namespace tzrec {

class DynamicRowIndex {
 public:
  struct State {
    std::vector<int64_t> ids;     // held ids, ascending
    std::vector<int64_t> scores;  // per held id
    int64_t step = 0;
    std::vector<int64_t> counter_ids;  // ascending
    std::vector<int64_t> counter_counts;
  };
  // Rows a training step handed to new ids: each must be initialised for its id.
  struct Admitted {
    std::vector<int64_t> rows;
    std::vector<int64_t> ids;
  };

  DynamicRowIndex(const fg::DynamicEmbSpec& spec, std::string table);
  ~DynamicRowIndex();
  DynamicRowIndex(const DynamicRowIndex&) = delete;
  DynamicRowIndex& operator=(const DynamicRowIndex&) = delete;

  const fg::DynamicEmbSpec& spec() const { return spec_; }
  int64_t capacity() const { return spec_.max_capacity; }
  // Ids holding a row; they hold rows [0, size()).
  int64_t size() const { return static_cast<int64_t>(id_of_row_.size()); }
  // Rows the table needs: capacity plus the two shared rows.
  int64_t table_rows() const { return capacity() + 2; }
  int64_t unadmitted_row() const { return capacity(); }
  int64_t missing_row() const { return capacity() + 1; }
  int64_t step() const { return step_; }

  // Row of each id, `fallback` for ids holding none.
  void Map(const int64_t* ids, int64_t n, int64_t fallback, int64_t* rows) const;
  // One training step over its unique `ids` (ascending) with their occurrence `counts`
  // (summed over ranks in a distributed run, so every rank decides alike).
  Admitted Train(const std::vector<int64_t>& ids, const std::vector<int64_t>& counts);

  State SaveState() const;
  // `what` names the checkpoint in errors. Returns the rows of state.ids (0, 1, ...).
  void RestoreState(const State& state, const std::string& what);

 private:
  struct Maps;
  void Hold(int64_t id, int64_t row, int64_t score);
  fg::DynamicEmbSpec spec_;
  std::string table_;
  std::unique_ptr<Maps> maps_;
  std::vector<int64_t> id_of_row_;
  std::vector<int64_t> score_of_row_;
  std::vector<int64_t> touched_of_row_;  // the step a row's id was last accessed in
  int64_t step_ = 0;
  bool warned_full_ = false;
};

}  // namespace tzrec
