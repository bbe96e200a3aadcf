// ZchRowIndex: zero-collision hashing for one embedding table — TorchRec's managed-collision
// (MCH) module as TorchEasyRec configures it through a feature's `zch`.
//
// The table has `size` rows. Raw ids are admitted to rows and evicted from them in rounds:
// training forwards record their ids into a history (sized on the first batch to
// ids x eviction_interval x 1.25, later ids of a round beyond it are dropped); every
// eviction_interval forwards the history is coalesced into unique ids with counts (and last
// access step), ids already holding a row update their slot's metadata, and the policy ranks
// the slots and the newcomers together (LFU: access count; LRU: -(steps since last access + 1)
// ^ decay; distance-LFU: count / (steps since + 1) ^ decay; ties broken by position, slots
// before newcomers, newcomers by count). The `size` best stay or get in; the slots that lose
// take the winning newcomers, and their rows must be re-initialised (returned). Between rounds
// an id keeps its row; an id without one maps to the last row (`size - 1`), which is kept
// for them and never given to an id. Evaluation and serving only map.
//
// State (saved with the table): the slots' ids sorted ascending, each slot's row, the policy's
// per-slot metadata, the step counter and the history's size; the history itself is not saved
// (as in TorchRec): checkpoints fall on round ends when the checkpoint interval is a multiple
// of eviction_interval, and a resumed run otherwise starts a new round.
//
// Deviations from TorchRec, on purpose: an id equal to INT64_MAX (TorchRec's empty-slot marker)
// always maps to the shared row; a history is sized on the first forward that has ids (TorchRec
// sizes it on the first forward, and one without ids would admit nothing ever after); the
// probabilistic filter draws from its own seeded generator.
//
// Thread safety: Map() may run concurrently with other Map() calls; Record()/Evict()/Restore()
// need exclusive access (the trainer's one thread).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/fg/zch_spec.h"

namespace tzrec {

class ZchRowIndex {
 public:
  // One round's history, coalesced: unique ids ascending, with their counts and last access step.
  struct History {
    std::vector<int64_t> ids;
    std::vector<int64_t> counts;
    std::vector<int64_t> last_access;
    // The union of several histories (ranks'): counts added, last access the latest.
    static History Merge(const std::vector<History>& parts);
  };

  // The saved form; metadata vectors the policy does not use are empty.
  struct State {
    std::vector<int64_t> sorted_ids;   // [size], INT64_MAX for empty slots
    std::vector<int64_t> rows;         // [size], a permutation of [0, size)
    std::vector<int64_t> counts;       // lfu, distance_lfu
    std::vector<int64_t> last_access;  // lru, distance_lfu
    int64_t step = 0;                  // training forwards seen
    // Ids a round's history holds (-1: not sized yet). TorchRec re-sizes it after a restart;
    // keeping it makes a resumed run drop exactly the ids an uninterrupted one drops.
    int64_t history_capacity = -1;
  };

  ZchRowIndex(const fg::ZchSpec& spec, std::string table);

  const fg::ZchSpec& spec() const { return spec_; }
  int64_t size() const { return spec_.size; }
  // Ids holding a row now.
  int64_t admitted() const;

  // Row of each id: its slot's row, or size - 1.
  void Map(const int64_t* ids, int64_t n, int64_t* rows) const;

  // A training forward: starts a step, then records its ids (every lookup of the table, in
  // order; `parts` are (pointer, count) spans). Returns true when this step ends a round: the
  // caller then takes the history (TakeHistory), merges it with other ranks' if any, and calls
  // Evict before mapping this forward's ids.
  bool Record(const std::vector<std::pair<const int64_t*, int64_t>>& parts);
  // The round's history, coalesced; clears it.
  History TakeHistory();
  // Admits / evicts by the policy from a (merged) round history. Returns the rows whose ids
  // changed (sorted): their weights and optimizer state must be re-initialised.
  std::vector<int64_t> Evict(const History& history);

  State SaveState() const;
  // `where` names the source in errors (a wrong size, unsorted ids, rows not a permutation).
  void RestoreState(State state, const std::string& where);

 private:
  double Score(int64_t count, int64_t last_access) const;
  std::vector<bool> FilterMask(const std::vector<int64_t>& counts);

  fg::ZchSpec spec_;
  std::string table_;
  bool uses_counts_ = false;
  bool uses_last_access_ = false;
  std::vector<int64_t> sorted_ids_;
  std::vector<int64_t> rows_;
  std::vector<int64_t> counts_;
  std::vector<int64_t> last_access_;
  int64_t step_ = 0;
  // The round: started_ once the first forward after construction / restore ran.
  bool started_ = false;
  int64_t last_eviction_step_ = 0;
  int64_t history_capacity_ = -1;
  std::vector<int64_t> history_;
  std::vector<int64_t> history_step_;
};

}  // namespace tzrec
