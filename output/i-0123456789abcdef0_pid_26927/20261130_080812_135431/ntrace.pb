torch_neuronx stand-in placeholder: ntrace.pb
