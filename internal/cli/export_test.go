package cli

// RequireFails is requireFails, for the tests in package cli_test.
var RequireFails = requireFails
