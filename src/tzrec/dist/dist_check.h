// `tzrec dist_check`: joins the process group and verifies the collectives training uses
// (allreduce, allgather, uneven alltoall, barrier), printing the result per rank. Run it under
// `tzrec launch` or torchrun to check a cluster's connectivity before a long job.
// `--fail_rank=R` makes rank R exit with code 3 before the collectives (tests the failure path).
#pragma once

#include <string>
#include <vector>

namespace tzrec {

int DistCheckMain(const std::vector<std::string>& args);

}  // namespace tzrec
