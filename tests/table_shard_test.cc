// TableShard's row placement: every logical row of a table_wise / row_wise table lives on
// exactly one rank, at a local row that maps back to it, and a rank's local rows are the
// first local_rows(r) ones.
#include "tzrec/embedding/table_shard.h"

#include <gtest/gtest.h>

#include <vector>

namespace tzrec {
namespace {

TableShard Shard(TableShard::Type type, int64_t rows, int world, int rank, int owner = 0) {
  TableShard shard;
  shard.type = type;
  shard.rows = rows;
  shard.dim = 8;
  shard.world_size = world;
  shard.rank = rank;
  shard.owner = owner;
  return shard;
}

TEST(TableShard, EveryRowHasOneOwnerAndMapsBack) {
  for (TableShard::Type type : {TableShard::Type::kRowWise, TableShard::Type::kTableWise}) {
    for (int world = 1; world <= 5; ++world) {
      for (int64_t rows = 1; rows <= 13; ++rows) {
        const TableShard shard = Shard(type, rows, world, 0, /*owner=*/world - 1);
        std::vector<int64_t> held(world, 0);
        for (int64_t row = 0; row < rows; ++row) {
          const int owner = shard.OwnerOfRow(row);
          ASSERT_GE(owner, 0);
          ASSERT_LT(owner, world);
          const int64_t local = shard.LocalRow(row);
          ASSERT_GE(local, 0);
          ASSERT_LT(local, shard.local_rows(owner)) << "row " << row << " of " << rows << ", world " << world;
          EXPECT_EQ(shard.row_offset(owner) + local * shard.row_step(), row);
          ++held[owner];
        }
        for (int r = 0; r < world; ++r) EXPECT_EQ(held[r], shard.local_rows(r)) << "rank " << r;
      }
    }
  }
}

TEST(TableShard, RowWiseInterleavesSoSmallIdsSpreadOverRanks) {
  const TableShard shard = Shard(TableShard::Type::kRowWise, 10, 3, 1);
  EXPECT_EQ(shard.local_rows(0), 4);  // 0 3 6 9
  EXPECT_EQ(shard.local_rows(1), 3);  // 1 4 7
  EXPECT_EQ(shard.local_rows(2), 3);  // 2 5 8
  EXPECT_EQ(shard.OwnerOfRow(0), 0);
  EXPECT_EQ(shard.OwnerOfRow(1), 1);
  EXPECT_EQ(shard.OwnerOfRow(2), 2);
  EXPECT_EQ(shard.LocalRow(7), 2);
  // Fewer rows than ranks: the last ranks hold none.
  const TableShard tiny = Shard(TableShard::Type::kRowWise, 2, 3, 2);
  EXPECT_EQ(tiny.local_rows(0), 1);
  EXPECT_EQ(tiny.local_rows(1), 1);
  EXPECT_EQ(tiny.local_rows(2), 0);
}

TEST(TableShard, ColumnWiseHoldsEveryRowAndSplitsColumns) {
  const TableShard shard = Shard(TableShard::Type::kColumnWise, 10, 3, 1);
  int columns = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(shard.local_rows(r), 10);
    EXPECT_EQ(shard.column_begin(r), columns);
    columns = shard.column_end(r);
  }
  EXPECT_EQ(columns, 8);
  EXPECT_EQ(shard.LocalRow(7), 7);
}

}  // namespace
}  // namespace tzrec
