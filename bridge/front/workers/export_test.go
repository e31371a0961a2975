package workers

// Test set-up for the external examples (package workers_test).

// SetUpForExamples returns the workers' interpreter and the exported test artifacts (as needSetup prepares them).
func SetUpForExamples() (string, map[string]string, error) {
	setupOnce.Do(func() { testDir, setupErr = prepare() })
	return python, artifacts, setupErr
}
