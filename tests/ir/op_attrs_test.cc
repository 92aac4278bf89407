// The op attribute schema (OP_ATTR rows of ir/ops.def) and its readers:
// defaults come from the schema, a set value wins over it, and reading an
// attribute an op does not take is an internal error.
#include "ir/op_attrs.h"

#include "gtest/gtest.h"

namespace stepjit::ir {
namespace {

TEST(OpAttrsTest, ReadersGiveTheSchemaDefaultOrTheValue) {
  const Attrs none;
  EXPECT_EQ((GetAttr<OpId::kLayerNorm, AttrKey::kNormalizedNdim>(none)), 1);
  EXPECT_EQ(AttrFloat(OpId::kLayerNorm, none, AttrKey::kEps), 1e-5);
  EXPECT_EQ(AttrInt(OpId::kVar, none, AttrKey::kCorrection), 1);
  EXPECT_EQ(AttrString(OpId::kCrossEntropy, none, AttrKey::kReduction), "mean");
  EXPECT_EQ(AttrString(OpId::kAllReduce, none, AttrKey::kReduceOp), "sum");
  EXPECT_TRUE(AttrBool(OpId::kTopk, none, AttrKey::kLargest));
  EXPECT_EQ(AttrInt(OpId::kTopk, none, AttrKey::kDim), -1);
  EXPECT_EQ((GetAttr<OpId::kArange, AttrKey::kStep>(none)), 1.0);
  EXPECT_EQ((GetAttr<OpId::kSum, AttrKey::kDims>(none)),
            std::vector<int64_t>{});

  const Attrs set{{AttrKey::kNormalizedNdim, int64_t{2}},
                  {AttrKey::kEps, 0.25},
                  {AttrKey::kDims, std::vector<int64_t>{0, 2}}};
  EXPECT_EQ((GetAttr<OpId::kLayerNorm, AttrKey::kNormalizedNdim>(set)), 2);
  EXPECT_EQ(AttrFloat(OpId::kLayerNorm, set, AttrKey::kEps), 0.25);
  EXPECT_EQ((GetAttr<OpId::kSum, AttrKey::kDims>(set)),
            (std::vector<int64_t>{0, 2}));
}

TEST(OpAttrsTest, SchemaListsEachOpsAttributesInOrder) {
  EXPECT_TRUE(OpAttrs(OpId::kNeg).empty());
  const absl::Span<const OpAttr> topk = OpAttrs(OpId::kTopk);
  ASSERT_EQ(topk.size(), 4u);
  EXPECT_EQ(topk[0].key, AttrKey::kK);
  EXPECT_TRUE(topk[0].required);
  EXPECT_EQ(topk[1].key, AttrKey::kDim);
  EXPECT_FALSE(topk[1].required);
  EXPECT_EQ(std::get<int64_t>(topk[1].default_value), -1);
  EXPECT_EQ(FindOpAttr(OpId::kSum, AttrKey::kCorrection), nullptr);
  ASSERT_NE(FindOpAttr(OpId::kVar, AttrKey::kCorrection), nullptr);
  EXPECT_EQ(FindOpAttr(OpId::kVar, AttrKey::kCorrection)->type, AttrType::kInt);
  EXPECT_STREQ(AttrTypeName(AttrType::kInts), "[int]");
}

TEST(OpAttrsTest, ReadingAnAttributeTheOpDoesNotTakeIsAnInternalError) {
  EXPECT_DEATH(AttrInt(OpId::kSum, Attrs{}, AttrKey::kCorrection),
               "sum reads attribute 'correction' as int, which ir/ops.def "
               "does not give it");
  EXPECT_DEATH(AttrFloat(OpId::kVar, Attrs{}, AttrKey::kCorrection),
               "var reads attribute 'correction' as float");
}

}  // namespace
}  // namespace stepjit::ir
