package admission

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAClassKeepsItsDriver: the driver of a NodeClass made its Nodes'
// machines and alone can remove them, so an update that changes
// spec.driver is refused, naming the field; an update that keeps it, with
// another section of the same driver, is not, and neither is a class
// created with any driver.
func TestAClassKeepsItsDriver(t *testing.T) {
	class := func(spec string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"nodeset.dev/v1alpha1","kind":"NodeClass","metadata":{"name":"c"},"spec":` + spec + `}`)}
	}
	simulated := class(`{"driver":"simulated","simulated":{"instanceType":"sim.small"}}`)
	tests := []struct {
		name      string
		operation admissionv1.Operation
		old, cur  runtime.RawExtension
		refused   bool
	}{
		{"another driver", admissionv1.Update, simulated, class(`{"driver":"docker-machine","dockerMachine":{"driverName":"fake"}}`), true},
		{"an out-of-tree driver", admissionv1.Update, simulated, class(`{"driver":"example.com-vms","parameters":{"size":"small"}}`), true},
		{"one out-of-tree driver for another", admissionv1.Update,
			class(`{"driver":"example.com-vms","parameters":{}}`), class(`{"driver":"example.com-other","parameters":{}}`), true},
		{"the same driver, another machine", admissionv1.Update, simulated, class(`{"driver":"simulated","simulated":{"instanceType":"sim.large"}}`), false},
		{"created", admissionv1.Create, runtime.RawExtension{}, class(`{"driver":"docker-machine","dockerMachine":{"driverName":"fake"}}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, ClassHandler(), &admissionv1.AdmissionRequest{UID: "1", Operation: tt.operation, Object: tt.cur, OldObject: tt.old})
			require.Equal(t, !tt.refused, resp.Allowed, "%+v", resp.Result)
			if tt.refused {
				assert.Contains(t, resp.Result.Message, "spec.driver")
				assert.Contains(t, resp.Result.Message, "create a NodeClass under another name")
			}
		})
	}
}
