# The torch-neuronx 1.0 wheel on PyPI is a placeholder holding only this line;
# the real package comes from the Neuron repository.
raise ImportError("WRONG PACKAGE. Please install the package from Neuron Repository - pip.repos.neuron.amazonaws.com")
