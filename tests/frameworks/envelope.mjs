// The spec's envelope, checked on what a framework sent (its suite's request summary): tools
// empty, forwardedProps only iacCode, each runId used once. Shared by the framework suites.
import assert from "node:assert/strict";

/** Throws (an AssertionError naming the rule) when the summary breaks the envelope. */
export function checkEnvelope(summary) {
  if (!summary.runRequests) return;
  assert.equal(summary.nonEmptyTools, 0, "tools must be empty");
  assert.equal(summary.runIdsReused, 0, "a runId is never reused");
  assert.deepEqual(summary.forwardedPropsKeys, ["iacCode"]);
}
