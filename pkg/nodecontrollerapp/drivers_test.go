package nodecontrollerapp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/simulated"
)

// groupOnly is the smallest out-of-tree group driver.
type groupOnly struct{ drivers.GroupDriver }

func (groupOnly) Name() string { return "example-group" }

// notADriver implements neither contract.
type notADriver struct{ drivers.Driver }

func (notADriver) Name() string { return "half" }

func factory(name string, d drivers.Driver) Driver {
	return Driver{Name: name, New: func(context.Context, Env) (drivers.Driver, error) { return d, nil }}
}

func TestDriversAreMadeThroughOneFactory(t *testing.T) {
	known := append(builtins(&dockerMachineOptions{}, nil, nil, nil), factory("example-group", groupOnly{}), factory("half", notADriver{}))
	served, err := chooseDrivers([]string{"simulated", " example-group", "simulated"}, known)
	require.NoError(t, err)
	registry, err := makeDrivers(context.Background(), served, Env{})
	require.NoError(t, err)
	assert.Len(t, registry, 2, "each driver once")
	_, ok := registry.Machine(nodesetv1alpha1.DriverSimulated)
	assert.True(t, ok, "the built-in simulated driver is made by its factory")
	_, ok = registry.Group("example-group")
	assert.True(t, ok, "an out-of-tree group driver is served as a group driver")

	_, err = chooseDrivers([]string{"nope"}, known)
	assert.ErrorContains(t, err, `unknown driver "nope" in --drivers; known drivers: simulated, docker-machine, eks-asg, eks-managed, example-group, half`)
	served, err = chooseDrivers([]string{"half"}, known)
	require.NoError(t, err)
	_, err = makeDrivers(context.Background(), served, Env{})
	assert.ErrorContains(t, err, "driver half is neither a drivers.MachineDriver nor a drivers.GroupDriver")
	_, err = makeDrivers(context.Background(), []Driver{factory("other-name", groupOnly{})}, Env{})
	assert.ErrorContains(t, err, `driver other-name calls itself "example-group"`)
}

// TestMachinesHandlerWhileDriversAreMade is run with -race by make test:
// /debug/machines is served from process start, while the leader makes
// its drivers; it answers 503 until they are published, then lists them.
func TestMachinesHandlerWhileDriversAreMade(t *testing.T) {
	var published atomic.Pointer[drivers.Registry]
	handler := machinesHandler(published.Load)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	codes := make(chan int, 1000)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/machines", nil))
				select {
				case codes <- rec.Code:
				default:
				}
			}
		}()
	}
	served, err := chooseDrivers([]string{"simulated"}, builtins(&dockerMachineOptions{}, nil, nil, nil))
	require.NoError(t, err)
	registry, err := makeDrivers(context.Background(), served, Env{})
	require.NoError(t, err)
	sim := registry[nodesetv1alpha1.DriverSimulated].(*simulated.Driver)
	sim.Adopt("m1", time.Now(), drivers.Class{Name: "sim"}, drivers.Owner{Namespace: "team-a", Name: "web"})
	published.Store(&registry)
	deadline := time.After(time.Minute)
	for ok := false; !ok; {
		select {
		case code := <-codes:
			ok = code == http.StatusOK
		case <-deadline:
			t.Fatal("the handler never served the published drivers")
		}
	}
	close(stop)
	wg.Wait()

	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/machines", nil))
	var entries []machineEntry
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &entries))
	require.Len(t, entries, 1)
	assert.Equal(t, "m1", entries[0].Name)
	assert.Equal(t, "web", entries[0].NodeSet)
}

// leakyLister is an out-of-tree machine driver whose List error quotes the
// credential it was made with.
type leakyLister struct{ drivers.MachineDriver }

func (leakyLister) Name() string { return "leaky" }
func (leakyLister) List(context.Context) ([]drivers.MachineStatus, error) {
	return nil, errors.New(`GET https://api.example.com/machines?token=planted-secret-3141: 503`)
}

// TestMachinesHandlerShowsNoDriverText: /debug/machines answers a failed
// List with the driver's name, not with its error, which may quote a
// credential the handler has no way to scrub.
func TestMachinesHandlerShowsNoDriverText(t *testing.T) {
	registry := drivers.Registry{"leaky": leakyLister{}}
	rec := httptest.NewRecorder()
	machinesHandler(func() *drivers.Registry { return &registry }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/machines", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "leaky")
	assert.NotContains(t, rec.Body.String(), "planted-secret-3141")
}
