package dockermachine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
)

// recordFieldsKey is the key, in the saved configuration a Store is given,
// of the record's fields that are the driver's own (Class, HostKey, NodeUID): kept
// with the plugin's configuration, they need nothing of a Store but to keep
// Config as it is. The plugin never sees them.
const recordFieldsKey = "nodeset.dev/machine"

// driverFields are the fields of a record kept under recordFieldsKey.
type driverFields struct {
	Class   string    `json:"class,omitempty"`
	HostKey string    `json:"hostKey,omitempty"`
	NodeUID types.UID `json:"nodeUID,omitempty"`
}

// fieldsStore keeps a record's Class, HostKey and NodeUID in its Config.
type fieldsStore struct{ Store }

func (s fieldsStore) Get(ctx context.Context, name string) (Record, error) {
	record, err := s.Store.Get(ctx, name)
	if err != nil {
		return record, err
	}
	return opened(record), nil
}

func (s fieldsStore) Put(ctx context.Context, record *Record) error {
	stored := sealed(*record)
	if err := s.Store.Put(ctx, &stored); err != nil {
		return err
	}
	record.Version = stored.Version
	return nil
}

func (s fieldsStore) List(ctx context.Context) ([]Record, error) {
	records, err := s.Store.List(ctx)
	for i := range records {
		records[i] = opened(records[i])
	}
	return records, err
}

// sealed is record with its Class, HostKey and NodeUID added to its
// Config, when Config is a JSON object (every libmachine driver's is); a
// configuration that is not one is kept without them.
func sealed(record Record) Record {
	if record.Class == "" && record.HostKey == "" && record.NodeUID == "" {
		return record
	}
	var config map[string]json.RawMessage
	if err := json.Unmarshal(record.Config, &config); err != nil || config == nil {
		return record
	}
	fields, err := json.Marshal(driverFields{Class: record.Class, HostKey: record.HostKey, NodeUID: record.NodeUID})
	if err != nil {
		return record
	}
	config[recordFieldsKey] = fields
	data, err := json.Marshal(config)
	if err != nil {
		return record
	}
	record.Config = data
	return record
}

// opened is a stored record with its Class, HostKey and NodeUID taken out of its
// Config, which is then the plugin's configuration alone.
func opened(record Record) Record {
	var config map[string]json.RawMessage
	if err := json.Unmarshal(record.Config, &config); err != nil {
		return record
	}
	raw, ok := config[recordFieldsKey]
	if !ok {
		return record
	}
	var fields driverFields
	if err := json.Unmarshal(raw, &fields); err != nil {
		return record
	}
	delete(config, recordFieldsKey)
	data, err := json.Marshal(config)
	if err != nil {
		return record
	}
	record.Config, record.Class, record.HostKey, record.NodeUID = data, fields.Class, fields.HostKey, fields.NodeUID
	return record
}

// leftBehind reports whether the record is of a machine made, with the
// same plugin, class and owner, for another Node of the machine's name
// (both UIDs known): the Node's predecessor, deleted without its machine
// (its finalizer removed by hand). Node names are unique, so that Node is
// gone, and its deletion was to remove the machine. Only a Node made
// again as it was replaces its predecessor's machine: a record of another
// plugin, class or owner is refused and told (notTheNodes), whatever its
// UID, and the Node's deletion removes it.
func leftBehind(record Record, machine drivers.Machine, plugin string) bool {
	return record.NodeUID != "" && machine.NodeUID != "" && record.NodeUID != machine.NodeUID &&
		notTheNodes(record, machine, plugin) == nil
}

// notTheNodes says why the machine of a record is not the one of the Node
// asking for a machine of its name, nil when it is: the record names
// another plugin, another class or another owner (another NodeSet, a
// NodeSet of the same name made again, a static Node where a NodeSet's
// was). It is then the machine of a Node deleted without it (its finalizer
// removed by hand), never to be handed to its successor. Only what both
// know is compared: a record written before its class was kept, or an
// owner whose NodeSet's UID the caller does not know, is the Node's.
func notTheNodes(record Record, machine drivers.Machine, plugin string) error {
	differs := record.Plugin != plugin ||
		(record.Class != "" && machine.Class.Name != "" && record.Class != machine.Class.Name) ||
		record.Owner.Cluster != machine.Owner.Cluster || record.Owner.Namespace != machine.Owner.Namespace || record.Owner.Name != machine.Owner.Name ||
		(record.Owner.UID != "" && machine.Owner.UID != "" && record.Owner.UID != machine.Owner.UID)
	if !differs {
		return nil
	}
	return fmt.Errorf("machine %s exists and is not this Node's: it was made with %s; this Node asks for %s. "+
		"Its Node was deleted without it; deleting this Node removes that machine, and a Node made again after gets one of its own",
		record.Name, describeMachine(record.Plugin, record.Class, record.Owner, machine.Owner),
		describeMachine(plugin, machine.Class.Name, machine.Owner, machine.Owner))
}

// describeMachine names a machine's plugin, class and owner, as told to
// whoever acts for viewer: another namespace's NodeSet is not named to a
// tenant (Owner.NamedTo). Every user may read NodeClasses.
func describeMachine(plugin, class string, owner, viewer drivers.Owner) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s", BinaryName(plugin))
	if class != "" {
		fmt.Fprintf(&b, ", class %s", class)
	}
	fmt.Fprintf(&b, ", for %s", owner.NamedTo(viewer))
	return b.String()
}
