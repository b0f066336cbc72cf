package example

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"nodeset.dev/nodeset/drivers"
)

// GroupName is the NodeClass spec.driver value the group driver serves.
const GroupName = "example-group"

// GroupDriver is a complete out-of-tree group driver: a "cloud" of groups
// that name their own machines. Each group is a directory under Root holding
// group.json, the cloud's record of the group (its desired size, its
// machines, its owner), and one directory per machine, named
// <group>-<n> by the group's counter.
//
// group.json is the one truth, always replaced whole, so each change (raise
// the size and launch machines; terminate a machine and lower the size) is
// one step a crash cannot split. Machine directories follow it.
type GroupDriver struct {
	Root string

	// mu serializes the read-modify-write of the records, as a cloud API
	// does: EnsureGroup and TerminateMachine run on different workers.
	mu sync.Mutex
}

var _ drivers.GroupDriver = (*GroupDriver)(nil)

// groupRecord is group.json.
type groupRecord struct {
	Owner     drivers.Owner `json:"owner"`
	CreatedAt int64         `json:"createdAt"`
	// ClassName is the NodeClass the group was last ensured with, for ListGroups.
	ClassName string `json:"className"`
	// Size and TemplateHash are the "launch template": new machines get them.
	Size         string `json:"size"`
	TemplateHash string `json:"templateHash"`
	DesiredSize  int32  `json:"desiredSize"`
	// Launched counts the machines ever launched; the next is <group>-<Launched+1>.
	Launched int             `json:"launched"`
	Machines []machineRecord `json:"machines"`
}

// machineRecord is a machine of a group.
type machineRecord struct {
	Name         string `json:"name"`
	Size         string `json:"size"`
	TemplateHash string `json:"templateHash"`
	CreatedAt    int64  `json:"createdAt"`
}

// Name is the driver's name.
func (d *GroupDriver) Name() string { return GroupName }

// Validate checks the class's parameters.
func (d *GroupDriver) Validate(_ context.Context, class drivers.Class) error {
	_, err := parameters(class)
	return err
}

// capacities are what a machine of each size offers.
var capacities = map[string]corev1.ResourceList{
	"small": {
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	},
	"large": {
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	},
}

// Capacity is what a machine of the class's size offers.
func (d *GroupDriver) Capacity(_ context.Context, class drivers.Class) (drivers.Capacity, error) {
	p, err := parameters(class)
	if err != nil {
		return drivers.Capacity{}, err
	}
	return drivers.Capacity{
		Resources: capacities[p.Size].DeepCopy(),
		Labels:    map[string]string{corev1.LabelInstanceTypeStable: "example-" + p.Size},
	}, nil
}

// groupProviderID is the providerID of a machine of a group.
func groupProviderID(group, machine string) string {
	return GroupName + "://" + group + "/" + machine
}

// parseGroupProviderID returns the group and machine of a providerID.
func parseGroupProviderID(providerID string) (group, machine string, err error) {
	rest, ok := strings.CutPrefix(providerID, GroupName+"://")
	if ok {
		group, machine, ok = strings.Cut(rest, "/")
	}
	if !ok || !isPlainName(group) || !isPlainName(machine) {
		return "", "", fmt.Errorf("providerID %q is not an %s machine", providerID, GroupName)
	}
	return group, machine, nil
}

// isPlainName reports whether name is one directory entry, never a path.
func isPlainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`)
}

// groupDir is the directory of a group; the name is the controller's.
func (d *GroupDriver) groupDir(name string) (string, error) {
	if !isPlainName(name) {
		return "", fmt.Errorf("group name %q is not a plain name", name)
	}
	return filepath.Join(d.Root, name), nil
}

// read returns a group's record, or an error wrapping drivers.ErrNotFound.
func (d *GroupDriver) read(name string) (groupRecord, error) {
	dir, err := d.groupDir(name)
	if err != nil {
		return groupRecord{}, err
	}
	var r groupRecord
	raw, err := os.ReadFile(filepath.Join(dir, "group.json"))
	if errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("group %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(raw, &r)
}

// write replaces a group's record whole (write, then rename), then makes
// the directory of every machine it lists; a crash between the two is
// mended by the next call.
func (d *GroupDriver) write(name string, r groupRecord) error {
	dir, err := d.groupDir(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "group.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "group.json")); err != nil {
		return err
	}
	for _, m := range r.Machines {
		if err := os.MkdirAll(filepath.Join(dir, m.Name), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// status is what the driver reports of a group.
func status(name string, r groupRecord) drivers.GroupStatus {
	s := drivers.GroupStatus{Name: name, DesiredSize: r.DesiredSize, State: "ACTIVE", Owner: r.Owner, CreatedAt: r.CreatedAt,
		Class: drivers.Class{Name: r.ClassName}}
	for _, m := range r.Machines {
		s.Machines = append(s.Machines, drivers.MachineStatus{Name: m.Name, ProviderID: groupProviderID(name, m.Name),
			State: drivers.MachineRunning, Owner: r.Owner, CreatedAt: m.CreatedAt, TemplateHash: m.TemplateHash})
	}
	return s
}

// EnsureGroup creates the group, or updates the one of this name: its
// launch template follows the class, its desired size is raised to
// group.Replicas (never lowered), and the group launches machines until it
// has that many.
func (d *GroupDriver) EnsureGroup(_ context.Context, group drivers.Group) (drivers.GroupStatus, error) {
	p, err := parameters(group.Class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.read(group.Name)
	if errors.Is(err, drivers.ErrNotFound) {
		r, err = groupRecord{CreatedAt: time.Now().Unix()}, nil
	}
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	r.Owner, r.ClassName, r.Size, r.TemplateHash = group.Owner, group.Class.Name, p.Size, group.TemplateHash
	r.DesiredSize = max(r.DesiredSize, group.Replicas)
	for len(r.Machines) < int(r.DesiredSize) {
		r.Launched++
		r.Machines = append(r.Machines, machineRecord{Name: fmt.Sprintf("%s-%d", group.Name, r.Launched),
			Size: r.Size, TemplateHash: r.TemplateHash, CreatedAt: time.Now().Unix()})
	}
	if err := d.write(group.Name, r); err != nil {
		return drivers.GroupStatus{}, err
	}
	return status(group.Name, r), nil
}

// DescribeGroup returns the group, or an error wrapping drivers.ErrNotFound.
func (d *GroupDriver) DescribeGroup(_ context.Context, _ drivers.Class, name string) (drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.read(name)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	return status(name, r), nil
}

// TerminateMachine removes one machine from its group and lowers the
// group's desired size by one in the same write of the record, so the
// group never launches a replacement. A machine already gone is not an
// error.
func (d *GroupDriver) TerminateMachine(_ context.Context, _ drivers.Class, group, providerID string) error {
	name, machine, err := parseGroupProviderID(providerID)
	if err != nil {
		return err
	}
	if name != group {
		return fmt.Errorf("machine %s is not in group %s", providerID, group)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.read(group)
	if errors.Is(err, drivers.ErrNotFound) {
		return nil // the group, and with it the machine, is gone
	}
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(r.Machines, func(m machineRecord) bool { return m.Name == machine }); i >= 0 {
		r.Machines = slices.Delete(r.Machines, i, i+1)
		r.DesiredSize = max(r.DesiredSize-1, 0)
		if err := d.write(group, r); err != nil {
			return err
		}
	}
	// Also when the record no longer lists it: a crash may have left its directory.
	return os.RemoveAll(filepath.Join(d.Root, group, machine))
}

// DeleteGroup removes the group and its machines; a group that is gone is
// not an error.
func (d *GroupDriver) DeleteGroup(_ context.Context, _ drivers.Class, name string) error {
	dir, err := d.groupDir(name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return os.RemoveAll(dir)
}

// ListGroups returns every group under Root, or an error: never part of them.
func (d *GroupDriver) ListGroups(context.Context) ([]drivers.GroupStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, err
	}
	var out []drivers.GroupStatus
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r, err := d.read(e.Name())
		if errors.Is(err, drivers.ErrNotFound) {
			continue // being created or deleted
		}
		if err != nil {
			return nil, err
		}
		out = append(out, status(e.Name(), r))
	}
	return out, nil
}
