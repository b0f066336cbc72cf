package framework

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// CrashPlan is a scale sequence and how many SIGKILLs to spread over it.
type CrashPlan struct {
	Sizes []int
	Kills int
	Seed  uint64
}

// PlanCrashes returns short (seeded, for make test) or, with
// NODESET_RELIABILITY=1 (make test-reliability), long with a new seed;
// NODESET_CRASH_SEED replays a run.
func PlanCrashes(t testing.TB, short, long CrashPlan) CrashPlan {
	t.Helper()
	p := short
	if os.Getenv("NODESET_RELIABILITY") != "" {
		p = long
		p.Seed = uint64(time.Now().UnixNano())
	}
	if s := os.Getenv("NODESET_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NODESET_CRASH_SEED: %v", err)
		}
		p.Seed = seed
	}
	t.Logf("crash plan: sizes %v, %d kills, NODESET_CRASH_SEED=%d", p.Sizes, p.Kills, p.Seed)
	return p
}

// RunCrashes goes through the plan's sizes: scale to each, then kill one of
// targets (chosen at random) with SIGKILL at random moments, restarting it
// each time, then settle (wait for convergence and check invariants). It
// returns how many kills there were.
func (p CrashPlan) RunCrashes(t testing.TB, targets []*Process, scale func(size int), settle func(step, size int)) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
	kills := 0
	for step, size := range p.Sizes {
		scale(size)
		for range p.Kills / len(p.Sizes) {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			target := targets[rng.IntN(len(targets))]
			target.Kill(syscall.SIGKILL)
			if err := target.Start(); err != nil {
				t.Fatalf("restarting %s: %v", target.Name, err)
			}
			kills++
		}
		settle(step, size)
	}
	t.Logf("survived %d SIGKILLs over sizes %v", kills, p.Sizes)
	return kills
}
