// Package example is a complete out-of-tree machine driver, small enough to
// read in one sitting: its machines are directories. A NodeClass uses it with
// driver: example-dir and free-form parameters; docs/drivers/out-of-tree.md
// walks through it, and the tests run it as its own node controller.
package example

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodeset.dev/nodeset/drivers"
)

// Name is the NodeClass spec.driver value this driver serves.
const Name = "example-dir"

// Parameters are what a class's spec.parameters may hold.
type Parameters struct {
	// Size is recorded with each machine; "small" or "large".
	Size string `json:"size"`
}

// Driver makes machines as directories under Root.
type Driver struct {
	Root string
}

var _ drivers.MachineDriver = (*Driver)(nil)

// Name is the driver's name.
func (d *Driver) Name() string { return Name }

func parameters(class drivers.Class) (Parameters, error) {
	var p Parameters
	if class.Spec.Parameters == nil {
		return p, drivers.InvalidConfiguration("spec.parameters", "is required: {size: small|large}")
	}
	decoder := json.NewDecoder(strings.NewReader(string(class.Spec.Parameters.Raw)))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&p); err != nil {
		return p, drivers.InvalidConfiguration("spec.parameters", "%v", err)
	}
	if p.Size != "small" && p.Size != "large" {
		return p, drivers.InvalidConfiguration("spec.parameters.size", "must be small or large, not %q", p.Size)
	}
	return p, nil
}

// Validate checks the class's parameters.
func (d *Driver) Validate(_ context.Context, class drivers.Class) error {
	_, err := parameters(class)
	return err
}

// Capacity is unknown before a machine exists.
func (d *Driver) Capacity(context.Context, drivers.Class) (drivers.Capacity, error) {
	return drivers.Capacity{}, drivers.ErrNotImplemented
}

type record struct {
	Size      string        `json:"size"`
	Owner     drivers.Owner `json:"owner"`
	CreatedAt int64         `json:"createdAt"`
}

func (d *Driver) dir(name string) string { return filepath.Join(d.Root, name) }

func providerID(name string) string { return Name + ":///" + name }

// Create makes the machine's directory, or finds it: idempotent by name.
func (d *Driver) Create(_ context.Context, m drivers.Machine) (string, error) {
	p, err := parameters(m.Class)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(d.dir(m.Name), "machine.json")); err == nil {
		return providerID(m.Name), nil
	}
	if err := os.MkdirAll(d.dir(m.Name), 0o755); err != nil {
		return "", err
	}
	data, err := json.Marshal(record{Size: p.Size, Owner: m.Owner, CreatedAt: time.Now().Unix()})
	if err != nil {
		return "", err
	}
	// Written whole or not at all: a crash never leaves half a machine.
	tmp := filepath.Join(d.dir(m.Name), "machine.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", err
	}
	return providerID(m.Name), os.Rename(tmp, filepath.Join(d.dir(m.Name), "machine.json"))
}

// Delete removes the machine; a machine that is gone is not an error.
func (d *Driver) Delete(_ context.Context, _ drivers.Class, name string) error {
	return os.RemoveAll(d.dir(name))
}

// Get returns the machine or an error wrapping drivers.ErrNotFound.
func (d *Driver) Get(_ context.Context, _ drivers.Class, name string) (drivers.MachineStatus, error) {
	data, err := os.ReadFile(filepath.Join(d.dir(name), "machine.json"))
	if errors.Is(err, os.ErrNotExist) {
		return drivers.MachineStatus{}, fmt.Errorf("machine %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return drivers.MachineStatus{}, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return drivers.MachineStatus{}, err
	}
	return drivers.MachineStatus{Name: name, ProviderID: providerID(name), State: drivers.MachineRunning, Owner: r.Owner, CreatedAt: r.CreatedAt}, nil
}

// List returns every machine, or an error: never part of them.
func (d *Driver) List(ctx context.Context) ([]drivers.MachineStatus, error) {
	entries, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, err
	}
	var out []drivers.MachineStatus
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		m, err := d.Get(ctx, drivers.Class{}, e.Name())
		if errors.Is(err, drivers.ErrNotFound) {
			continue // being created or removed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
