#include "tzrec/dist/dist_check.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/dist/process_group.h"

namespace tzrec {

int DistCheckMain(const std::vector<std::string>& args) {
  Flags flags("dist_check", "Checks the process group's collectives across all ranks.",
              {{"fail_rank", "this rank exits with code 3 before the collectives", false, "-1"}});
  if (!flags.Parse(args)) return 0;
  DistEnv env = ReadDistEnv();
  auto start = std::chrono::steady_clock::now();
  auto pg = ProcessGroup::Create(env);
  if (flags.GetInt("fail_rank") == env.rank) {
    std::fprintf(stderr, "dist_check: rank %d exits on purpose (--fail_rank)\n", env.rank);
    std::exit(3);
  }
  const int world = env.world_size, rank = env.rank;
  // allreduce: sum of (rank + 1) over ranks.
  std::vector<at::Tensor> sums = {at::full({4}, static_cast<float>(rank + 1))};
  pg->AllReduceSum(sums);
  const float expected_sum = world * (world + 1) / 2.0f;
  if (sums[0][0].item<float>() != expected_sum) Fail("allreduce gave ", sums[0][0].item<float>());
  // allgather of one value per rank.
  at::Tensor gathered = pg->AllGather(at::full({1}, static_cast<int64_t>(rank), at::kLong));
  for (int r = 0; r < world; ++r) {
    if (gathered[r].item<int64_t>() != r) Fail("allgather gave ", gathered[r].item<int64_t>(), " for rank ", r);
  }
  // uneven alltoall: rank r sends (p + 1) rows valued 100 r + p to rank p.
  std::vector<int64_t> send_counts;
  std::vector<at::Tensor> parts;
  for (int p = 0; p < world; ++p) {
    send_counts.push_back(p + 1);
    parts.push_back(at::full({p + 1, 2}, static_cast<float>(100 * rank + p)));
  }
  auto recv_counts = pg->ExchangeCounts(send_counts);
  at::Tensor received = pg->AllToAll(at::cat(parts, 0), send_counts, recv_counts);
  int64_t row = 0;
  for (int r = 0; r < world; ++r) {
    if (recv_counts[r] != rank + 1) Fail("alltoall counts: got ", recv_counts[r], " from rank ", r);
    for (int64_t i = 0; i < recv_counts[r]; ++i, ++row) {
      if (received[row][1].item<float>() != static_cast<float>(100 * r + rank)) Fail("alltoall values wrong");
    }
  }
  pg->CheckSameOnAllRanks("check string", "same");
  pg->Barrier();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("dist_check: rank %d of %d ok (allreduce, allgather, alltoall, barrier) in %.2f s\n",
              rank, world, seconds);
  return 0;
}

}  // namespace tzrec
