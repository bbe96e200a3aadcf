// `tzrec launch`: starts the local ranks of a distributed job, as torchrun does.
//
//   tzrec launch --nproc_per_node N [--nnodes M --node_rank K --master_addr A --master_port P]
//       -- train_eval --pipeline_config_path=...
//
// Each local rank runs this binary's subcommand with torchrun's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, and
// OMP_NUM_THREADS = cores / N unless set). Their output lines are prefixed with "[rank R] ".
// SIGINT/SIGTERM are forwarded to the ranks. When one rank fails, the others are stopped
// (SIGTERM, then SIGKILL after a grace period) and launch exits non-zero naming that rank and
// its exit code or signal. Multi-node: run the same command on every node with its
// --node_rank.
#pragma once

#include <string>
#include <vector>

namespace tzrec {

int LaunchMain(const std::vector<std::string>& args);

}  // namespace tzrec
