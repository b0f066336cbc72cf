package dockermachine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// credentialsDirName is the directory, inside a machine's store directory,
// of the files nodeset writes for credentialFileOptions. It is apart from
// the files plugins keep there themselves: generic copies its key to
// <machine dir>/<base name of the key file>, which must not be the file it
// copies from.
const credentialsDirName = "nodeset-credentials"

// machineDir is the machine's store directory, where libmachine drivers
// keep their files (BaseDriver.ResolveStorePath).
func (d *Driver) machineDir(name string) string {
	return filepath.Join(d.storePath, "machines", name)
}

// credentialFilePath is where the value of a credentialFileOptions entry
// is written for a machine.
func (d *Driver) credentialFilePath(machine, option string) string {
	return filepath.Join(d.machineDir(machine), credentialsDirName, option)
}

// credentialFiles are the paths credentialFileOptions pass to the plugin,
// by option.
func (d *Driver) credentialFiles(dm *nodesetv1alpha1.DockerMachine, machine string) map[string]string {
	out := map[string]string{}
	for option := range dm.CredentialFileOptions {
		out[option] = d.credentialFilePath(machine, option)
	}
	return out
}

// prepareMachineDir makes the machine's store directory, as the
// docker-machine client does before a driver's Create, and writes the
// class's file credentials into it (mode 0600, each replaced whole, so a
// plugin never reads half a key).
func (d *Driver) prepareMachineDir(dm *nodesetv1alpha1.DockerMachine, machine string, credentials map[string][]byte) error {
	if d.storePath == "" {
		return errors.New("the docker-machine driver has no store path (--docker-machine-store-path)")
	}
	dir := d.machineDir(machine)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making the store directory of machine %s: %w", machine, err)
	}
	if len(dm.CredentialFileOptions) == 0 {
		return nil
	}
	credDir := filepath.Join(dir, credentialsDirName)
	if err := os.MkdirAll(credDir, 0o700); err != nil {
		return fmt.Errorf("making the credentials directory of machine %s: %w", machine, err)
	}
	for _, option := range sortedKeys(dm.CredentialFileOptions) {
		key := dm.CredentialFileOptions[option]
		value, ok := credentials[key]
		if !ok {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.dockerMachine.credentialFileOptions[%s]", option), "the credentials Secret has no key %q", key)
		}
		path := d.credentialFilePath(machine, option)
		tmp, err := os.CreateTemp(credDir, "."+option+"-*")
		if err != nil {
			return fmt.Errorf("writing the file of credential option %s of machine %s: %w", option, machine, err)
		}
		_, werr := tmp.Write(value)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o600), os.Rename(tmp.Name(), path)); err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("writing the file of credential option %s of machine %s: %w", option, machine, err)
		}
	}
	return nil
}

// removeMachineDir removes the machine's store directory: the plugin's
// files (keys it copied or made) and the file credentials.
func (d *Driver) removeMachineDir(machine string) error {
	if d.storePath == "" || machine == "" || strings.ContainsAny(machine, `/\`) || machine == "." || machine == ".." {
		return nil
	}
	if err := os.RemoveAll(d.machineDir(machine)); err != nil {
		return fmt.Errorf("removing the store directory of machine %s: %w", machine, err)
	}
	return nil
}

// fileCredentials are the contents of the machine's credential files, so
// text about a machine whose class (or Secret) is gone is still scrubbed
// of them.
func (d *Driver) fileCredentials(machine string) map[string][]byte {
	if d.storePath == "" {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(d.machineDir(machine), credentialsDirName))
	if err != nil {
		return nil
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(d.machineDir(machine), credentialsDirName, e.Name())); err == nil {
			out["credential file "+e.Name()] = data
		}
	}
	return out
}
