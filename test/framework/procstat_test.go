package framework

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcStat(t *testing.T) {
	pid := os.Getpid()
	before, err := CPUTime(pid)
	require.NoError(t, err)
	// Burn some CPU; the clock-tick resolution is 10ms.
	deadline := time.Now().Add(150 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, err := CPUTime(pid)
	require.NoError(t, err)
	assert.Greater(t, after, before, "CPU time grows while the process computes (%d loops)", x)

	rss, peak, err := Memory(pid)
	require.NoError(t, err)
	assert.Positive(t, rss)
	assert.GreaterOrEqual(t, peak, rss)
}
