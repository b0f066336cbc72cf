package resolve

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// NamespaceRefusal says why a namespace may not use a class
// (spec.allowedNamespaces), or "" when it may. namespaceLabels reads the
// namespace's labels; it is called only for a class that picks namespaces
// by a selector. The NodeSetController's Accepted condition, the webhook
// and the node controller, before it grows or makes a cloud group, all
// judge a NodeSet's namespace with it.
func NamespaceRefusal(class *nodesetv1alpha1.NodeClass, namespace string, namespaceLabels func(namespace string) (map[string]string, error)) string {
	allowed := class.Spec.AllowedNamespaces
	if allowed == nil || allowed.From == "" || allowed.From == nodesetv1alpha1.NamespacesFromAll {
		return ""
	}
	switch allowed.From {
	case nodesetv1alpha1.NamespacesFromList:
		for _, ns := range allowed.Namespaces {
			if ns == namespace {
				return ""
			}
		}
		return "it is not in spec.allowedNamespaces.namespaces"
	case nodesetv1alpha1.NamespacesFromSelector:
		selector, err := metav1.LabelSelectorAsSelector(allowed.Selector)
		if err != nil {
			return fmt.Sprintf("the class's namespace selector is invalid: %v", err)
		}
		nsLabels, err := namespaceLabels(namespace)
		if err != nil {
			return fmt.Sprintf("cannot read the namespace: %v", err)
		}
		if !selector.Matches(labels.Set(nsLabels)) {
			return fmt.Sprintf("its labels do not match spec.allowedNamespaces.selector (%s)", selector)
		}
		return ""
	}
	return fmt.Sprintf("unknown spec.allowedNamespaces.from %q", allowed.From)
}

// NamespaceNotAllowedMessage is the message of a NamespaceNotAllowed
// refusal: the namespace, the class and why (NamespaceRefusal).
func NamespaceNotAllowedMessage(class *nodesetv1alpha1.NodeClass, namespace, why string) string {
	return fmt.Sprintf("namespace %q may not use NodeClass %q: %s", namespace, class.Name, why)
}
