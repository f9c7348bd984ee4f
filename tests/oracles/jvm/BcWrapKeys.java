import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.Security;
import java.security.spec.X509EncodedKeySpec;
import java.util.Base64;
import java.util.HexFormat;

import javax.crypto.Cipher;
import javax.crypto.KeyGenerator;

import org.bouncycastle.jce.provider.BouncyCastleProvider;

/**
 * AES-256 data keys wrapped as Aiven's tiered-storage plugin wraps them: a fresh key from the JDK's AES
 * KeyGenerator (AesEncryptionProvider) encrypted by BouncyCastle's "RSA/NONE/OAEPWithSHA3-512AndMGF1Padding"
 * under the public key (RsaEncryptionProvider.encryptDataKey). Arguments: the public key's PEM file
 * (X.509 SubjectPublicKeyInfo, "BEGIN PUBLIC KEY") and how many keys; prints "hex(key) base64(wrapped)" a line.
 */
public class BcWrapKeys {
    public static void main(String[] args) throws Exception {
        Security.addProvider(new BouncyCastleProvider());
        String pem = Files.readString(Path.of(args[0]));
        byte[] der = Base64.getMimeDecoder().decode(pem.replaceAll("-----[A-Z ]+-----", ""));
        PublicKey publicKey = KeyFactory.getInstance("RSA").generatePublic(new X509EncodedKeySpec(der));
        KeyGenerator aes = KeyGenerator.getInstance("AES");
        aes.init(256, new SecureRandom());
        int count = Integer.parseInt(args[1]);
        for (int i = 0; i < count; i++) {
            byte[] key = aes.generateKey().getEncoded();
            Cipher cipher = Cipher.getInstance("RSA/NONE/OAEPWithSHA3-512AndMGF1Padding", "BC");
            cipher.init(Cipher.ENCRYPT_MODE, publicKey, new SecureRandom());
            byte[] wrapped = cipher.doFinal(key);
            System.out.println(HexFormat.of().formatHex(key) + " " + Base64.getEncoder().encodeToString(wrapped));
        }
    }
}
