package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.Manifest;

/**
 * Runs one program of a bundle: {@code program.method} of {@code program.file} with positional
 * inputs, returning the positional outputs. The only part that knows the runtime
 * ({@code runtime.ExecuTorchRuntime} on the phone, recording fakes in the tests); which tensors
 * go in and come out, and in what order, is {@link BundlePrograms}' job.
 */
public interface ProgramExecutor {
    HostTensor[] execute(Manifest.Program program, HostTensor[] inputs) throws Exception;

    /** Release the loaded program files. */
    void close();
}
